// gloo_shim.cc - Gloo behind the C interface of gloo_shim.h: a gloo::rendezvous::Store over our
// TCP store, a TCP device, a full-mesh context, and the four collectives. Every Gloo exception is
// caught here and becomes a KdaError; nothing C++ crosses the interface.
#include "dist/gloo_shim.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

// Gloo's rendezvous keys, stored under "gloo/" in our store.
class StoreAdapter : public gloo::rendezvous::Store {
  public:
    StoreAdapter(KdaStore *s, double timeout_s) : s_(s), timeout_s_(timeout_s) {}

    void set(const std::string &key, const std::vector<char> &data) override {
        KdaError e;
        if (kda_store_set(s_, ("gloo/" + key).c_str(), data.data(), data.size(), &e))
            throw gloo::Exception(e.msg);
    }

    std::vector<char> get(const std::string &key) override {
        KdaError e;
        void *v = nullptr;
        size_t n = 0;
        if (kda_store_get(s_, ("gloo/" + key).c_str(), &v, &n, timeout_s_, &e))
            throw gloo::Exception(e.msg);
        std::vector<char> out(static_cast<char *>(v), static_cast<char *>(v) + n);
        std::free(v);
        return out;
    }

    void wait(const std::vector<std::string> &keys) override {
        for (const auto &k : keys)
            get(k);
    }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override {
        wait(keys);
    }

  private:
    KdaStore *s_;
    double timeout_s_;
};

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

} // namespace

struct KdaGloo {
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    uint32_t tag = 0;
};

extern "C" int kda_gloo_open(KdaGloo **out, KdaStore *store, int rank, int world,
                             const char *local_addr, double timeout_s, KdaError *err) {
    *out = nullptr;
    auto *g = new KdaGloo();
    try {
        gloo::transport::tcp::attr a;
        a.hostname = local_addr;
        g->dev = gloo::transport::tcp::CreateDevice(a);
        g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        g->ctx->setTimeout(std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));
        StoreAdapter st(store, timeout_s);
        g->ctx->connectFullMesh(st, g->dev);
    } catch (const std::exception &e) {
        delete g;
        return kda_fail(err, "gloo: connecting rank %d of %d from %s: %s", rank, world, local_addr,
                        e.what());
    }
    *out = g;
    return 0;
}

extern "C" void kda_gloo_close(KdaGloo *g) {
    delete g;
}

extern "C" int kda_gloo_allreduce(KdaGloo *g, void *buf, size_t n, int dtype, int op,
                                  KdaError *err) {
    try {
        gloo::AllreduceOptions o(g->ctx);
        if (dtype == 0) {
            o.setOutput(static_cast<float *>(buf), n);
            o.setReduceFunction(op ? static_cast<ReduceFn>(&gloo::max<float>)
                                   : static_cast<ReduceFn>(&gloo::sum<float>));
        } else {
            o.setOutput(static_cast<double *>(buf), n);
            o.setReduceFunction(op ? static_cast<ReduceFn>(&gloo::max<double>)
                                   : static_cast<ReduceFn>(&gloo::sum<double>));
        }
        o.setTag(g->tag++);
        gloo::allreduce(o);
    } catch (const std::exception &e) {
        return kda_fail(err, "gloo all-reduce: %s", e.what());
    }
    return 0;
}

extern "C" int kda_gloo_allgather(KdaGloo *g, const void *in, void *out, size_t bytes,
                                  KdaError *err) {
    try {
        gloo::AllgatherOptions o(g->ctx);
        o.setInput(const_cast<char *>(static_cast<const char *>(in)), bytes);
        o.setOutput(static_cast<char *>(out), bytes * static_cast<size_t>(g->ctx->size));
        o.setTag(g->tag++);
        gloo::allgather(o);
    } catch (const std::exception &e) {
        return kda_fail(err, "gloo all-gather: %s", e.what());
    }
    return 0;
}

extern "C" int kda_gloo_broadcast(KdaGloo *g, void *buf, size_t bytes, int root, KdaError *err) {
    try {
        gloo::BroadcastOptions o(g->ctx);
        o.setOutput(static_cast<char *>(buf), bytes);
        o.setRoot(root);
        o.setTag(g->tag++);
        gloo::broadcast(o);
    } catch (const std::exception &e) {
        return kda_fail(err, "gloo broadcast: %s", e.what());
    }
    return 0;
}

extern "C" int kda_gloo_barrier(KdaGloo *g, KdaError *err) {
    try {
        gloo::BarrierOptions o(g->ctx);
        o.setTag(g->tag++);
        gloo::barrier(o);
    } catch (const std::exception &e) {
        return kda_fail(err, "gloo barrier: %s", e.what());
    }
    return 0;
}
