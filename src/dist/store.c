// store.c - the rendezvous key-value store: server thread (rank 0) and client (contract in
// store.h).
#include "dist/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h" // defines: now_seconds

// ---------------------------------------------------------------------------------------------
// Framing: op, u32 key length, key, u32 value length, value.

typedef struct {
    char op;
    char *key;
    uint8_t *val;
    uint32_t klen, vlen;
} Msg;

static int write_all_(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_msg_(int fd, char op, const char *key, const void *val, uint32_t vlen) {
    uint32_t klen = key ? (uint32_t)strlen(key) : 0;
    size_t n = 1 + 4 + klen + 4 + vlen;
    uint8_t *b = kda_malloc(n);
    b[0] = (uint8_t)op;
    memcpy(b + 1, &klen, 4);
    if (klen) memcpy(b + 5, key, klen);
    memcpy(b + 5 + klen, &vlen, 4);
    if (vlen) memcpy(b + 9 + klen, val, vlen);
    int rc = write_all_(fd, b, n);
    free(b);
    return rc;
}

// Parses one complete message at the front of buf[0, n); returns its size, 0 when incomplete.
static size_t parse_msg_(const uint8_t *buf, size_t n, Msg *m) {
    uint32_t klen, vlen;
    if (n < 5) return 0;
    memcpy(&klen, buf + 1, 4);
    if (n < 9 + (size_t)klen) return 0;
    memcpy(&vlen, buf + 5 + klen, 4);
    size_t total = 9 + (size_t)klen + vlen;
    if (n < total) return 0;
    m->op = (char)buf[0];
    m->klen = klen;
    m->vlen = vlen;
    m->key = kda_malloc((size_t)klen + 1);
    memcpy(m->key, buf + 5, klen);
    m->key[klen] = 0;
    m->val = kda_malloc(vlen ? vlen : 1);
    memcpy(m->val, buf + 9 + klen, vlen);
    return total;
}

static void msg_free_(Msg *m) {
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------------------------
// Server: one thread, poll() over the listening socket and the clients.

typedef struct {
    int fd, rank; // rank -1 until hello
    uint8_t *buf;
    size_t n, cap;
    char *waiting; // key of a pending get, or NULL
} Conn;

typedef struct {
    char *key;
    uint8_t *val;
    uint32_t n;
} Entry;

typedef struct {
    int lfd, wake[2], world;
    pthread_t th;
    pthread_mutex_t mu; // guards state (read by rank 0's linger)
    char *state;        // [world + 1] KDA_STORE_* letters
    Conn *conns;
    int n_conns;
    Entry *kv;
    int n_kv;
} Server;

static Entry *kv_find_(Server *s, const char *key) {
    for (int i = 0; i < s->n_kv; i++)
        if (!strcmp(s->kv[i].key, key)) return &s->kv[i];
    return NULL;
}

static void conn_drop_(Server *s, int i) {
    Conn *c = &s->conns[i];
    pthread_mutex_lock(&s->mu);
    if (c->rank >= 0 && s->state[c->rank] == KDA_STORE_ALIVE) s->state[c->rank] = KDA_STORE_DIED;
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c->buf);
    free(c->waiting);
    s->conns[i] = s->conns[--s->n_conns];
}

// Answers a pending get of c when its key exists now.
static void serve_wait_(Server *s, Conn *c) {
    if (!c->waiting) return;
    Entry *e = kv_find_(s, c->waiting);
    if (!e) return;
    send_msg_(c->fd, 'V', NULL, e->val, e->n);
    free(c->waiting);
    c->waiting = NULL;
}

static void handle_(Server *s, Conn *c, Msg *m) {
    if (m->op == 'H') {
        int r = atoi((const char *)m->val);
        pthread_mutex_lock(&s->mu);
        if (r >= 0 && r < s->world) {
            c->rank = r;
            s->state[r] = KDA_STORE_ALIVE;
        }
        pthread_mutex_unlock(&s->mu);
        send_msg_(c->fd, 'K', NULL, NULL, 0);
    } else if (m->op == 'S') {
        Entry *e = kv_find_(s, m->key);
        if (!e) {
            s->kv = kda_realloc(s->kv, (size_t)(s->n_kv + 1) * sizeof *s->kv);
            e = &s->kv[s->n_kv++];
            e->key = kda_strdup(m->key);
        } else {
            free(e->val);
        }
        e->val = m->val;
        e->n = m->vlen;
        m->val = NULL;
        send_msg_(c->fd, 'K', NULL, NULL, 0);
        for (int i = 0; i < s->n_conns; i++)
            serve_wait_(s, &s->conns[i]);
    } else if (m->op == 'G') {
        free(c->waiting);
        c->waiting = m->key;
        m->key = NULL;
        serve_wait_(s, c);
    } else if (m->op == 'P') {
        Entry *e = kv_find_(s, m->key);
        if (e)
            send_msg_(c->fd, 'V', NULL, e->val, e->n);
        else
            send_msg_(c->fd, 'N', NULL, NULL, 0);
    } else if (m->op == 'Q') {
        pthread_mutex_lock(&s->mu);
        send_msg_(c->fd, 'V', NULL, s->state, (uint32_t)s->world);
        pthread_mutex_unlock(&s->mu);
    } else if (m->op == 'B') {
        pthread_mutex_lock(&s->mu);
        if (c->rank >= 0) s->state[c->rank] = KDA_STORE_LEFT;
        pthread_mutex_unlock(&s->mu);
        send_msg_(c->fd, 'K', NULL, NULL, 0);
    }
}

// Reads what c has sent and handles every complete message; -1 when the connection closed.
static int conn_read_(Server *s, Conn *c) {
    if (c->cap - c->n < 4096) {
        c->cap = c->cap * 2 + 8192;
        c->buf = kda_realloc(c->buf, c->cap);
    }
    ssize_t r = recv(c->fd, c->buf + c->n, c->cap - c->n, 0);
    if (r < 0 && errno == EINTR) return 0;
    if (r <= 0) return -1;
    c->n += (size_t)r;
    size_t used;
    Msg m;
    while ((used = parse_msg_(c->buf, c->n, &m)) > 0) {
        handle_(s, c, &m);
        msg_free_(&m);
        memmove(c->buf, c->buf + used, c->n - used);
        c->n -= used;
    }
    return 0;
}

static void *server_main_(void *arg) {
    Server *s = arg;
    struct pollfd *pf = NULL;
    for (;;) {
        pf = kda_realloc(pf, (size_t)(s->n_conns + 2) * sizeof *pf);
        pf[0] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        for (int i = 0; i < s->n_conns; i++)
            pf[i + 2] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        int nc = s->n_conns;
        if (poll(pf, (nfds_t)nc + 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pf[1].revents) break; // stop requested
        for (int i = nc - 1; i >= 0; i--)
            if (pf[i + 2].revents && conn_read_(s, &s->conns[i])) conn_drop_(s, i);
        if (pf[0].revents & POLLIN) {
            int fd = accept(s->lfd, NULL, NULL);
            if (fd >= 0) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                s->conns = kda_realloc(s->conns, (size_t)(s->n_conns + 1) * sizeof *s->conns);
                s->conns[s->n_conns++] = (Conn){.fd = fd, .rank = -1};
            }
        }
    }
    free(pf);
    return NULL;
}

static int server_start_(Server **out, int port, int world, KdaError *err) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return kda_fail(err, "rendezvous: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 256)) {
        int e = errno;
        close(fd);
        return kda_fail(err,
                        "rendezvous: rank 0 cannot listen on port %d: %s (another job on this "
                        "port?)",
                        port, strerror(e));
    }
    Server *s = kda_calloc(1, sizeof *s);
    s->lfd = fd;
    s->world = world;
    s->state = kda_malloc((size_t)world + 1);
    memset(s->state, KDA_STORE_ABSENT, (size_t)world);
    s->state[world] = 0;
    pthread_mutex_init(&s->mu, NULL);
    if (pipe(s->wake) || pthread_create(&s->th, NULL, server_main_, s)) {
        close(fd);
        free(s->state);
        free(s);
        return kda_fail(err, "rendezvous: cannot start the server thread");
    }
    *out = s;
    return 0;
}

static void server_stop_(Server *s) {
    if (!s) return;
    if (write(s->wake[1], "x", 1) != 1) { /* the thread then ends with the process */
    }
    pthread_join(s->th, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    close(s->lfd);
    while (s->n_conns)
        conn_drop_(s, s->n_conns - 1);
    for (int i = 0; i < s->n_kv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->kv);
    free(s->conns);
    free(s->state);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// Client

struct KdaStore {
    int fd, rank, world;
    char host[256];
    int port;
    char local[64];
    Server *server; // rank 0 only
};

static int connect_once_(const char *host, int port, KdaError *err) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g)
        return kda_fail(err, "rendezvous: cannot resolve MASTER_ADDR %s: %s", host,
                        gai_strerror(g));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(res);
        return kda_fail(err, "rendezvous: socket: %s", strerror(errno));
    }
    int rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc) {
        kda_fail(err, "rendezvous: cannot connect to %s:%d: %s", host, port, strerror(errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Reads one reply; waits at most timeout_s. -1 on timeout or a lost connection.
static int recv_reply_(KdaStore *s, char *op, void **val, size_t *n, double timeout_s,
                       const char *what, KdaError *err) {
    uint8_t hdr[9];
    size_t got = 0, need = 9;
    uint8_t *body = NULL;
    double t_end = now_seconds() + timeout_s;
    for (int phase = 0; phase < 2; phase++) {
        uint8_t *dst = phase ? body : hdr;
        while (got < need) {
            int left = (int)((t_end - now_seconds()) * 1000);
            struct pollfd p = {.fd = s->fd, .events = POLLIN};
            int pr = left > 0 ? poll(&p, 1, left) : 0;
            if (pr < 0 && errno == EINTR) continue;
            if (pr == 0) {
                free(body);
                return kda_fail(err, "rendezvous: %s timed out after %.0f s", what, timeout_s);
            }
            ssize_t r = recv(s->fd, dst + got, need - got, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                free(body);
                return kda_fail(err,
                                "rendezvous: lost the connection to rank 0 at %s:%d during %s "
                                "(rank 0 exited or was killed)",
                                s->host, s->port, what);
            }
            got += (size_t)r;
        }
        if (phase == 0) {
            uint32_t klen, vlen;
            memcpy(&klen, hdr + 1, 4);
            memcpy(&vlen, hdr + 5, 4); // replies carry no key: klen is 0
            if (klen) return kda_fail(err, "rendezvous: malformed reply");
            *op = (char)hdr[0];
            body = kda_malloc(vlen ? vlen : 1);
            got = 0;
            need = vlen;
        }
    }
    if (val) {
        *val = body;
        *n = need;
    } else {
        free(body);
    }
    return 0;
}

static int request_op_(KdaStore *s, char op, const char *key, const void *val, size_t vn,
                       void **out, size_t *on, char *rop, double timeout_s, const char *what,
                       KdaError *err) {
    if (s->fd < 0) return kda_fail(err, "rendezvous: not connected");
    if (send_msg_(s->fd, op, key, val, (uint32_t)vn))
        return kda_fail(err,
                        "rendezvous: lost the connection to rank 0 at %s:%d during %s (rank 0 "
                        "exited or was killed)",
                        s->host, s->port, what);
    return recv_reply_(s, rop, out, on, timeout_s, what, err);
}

static int request_(KdaStore *s, char op, const char *key, const void *val, size_t vn, void **out,
                    size_t *on, double timeout_s, const char *what, KdaError *err) {
    char rop;
    return request_op_(s, op, key, val, vn, out, on, &rop, timeout_s, what, err);
}

int kda_store_open(KdaStore **out, const char *host, int port, int rank, int world,
                   double timeout_s, KdaError *err) {
    *out = NULL;
    KdaStore *s = kda_calloc(1, sizeof *s);
    s->fd = -1;
    s->rank = rank;
    s->world = world;
    s->port = port;
    snprintf(s->host, sizeof s->host, "%s", host);
    if (rank == 0 && server_start_(&s->server, port, world, err)) {
        free(s);
        return -1;
    }
    double t_end = now_seconds() + timeout_s;
    KdaError e = {{0}};
    while ((s->fd = connect_once_(host, port, &e)) < 0 && now_seconds() < t_end) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (s->fd < 0) {
        kda_fail(err, "%s (rank %d of %d, gave up after %.0f s)", e.msg, rank, world, timeout_s);
        server_stop_(s->server);
        free(s);
        return -1;
    }
    struct sockaddr_in la;
    socklen_t ll = sizeof la;
    if (getsockname(s->fd, (struct sockaddr *)&la, &ll) == 0)
        inet_ntop(AF_INET, &la.sin_addr, s->local, sizeof s->local);
    else
        snprintf(s->local, sizeof s->local, "127.0.0.1");
    char r[16];
    snprintf(r, sizeof r, "%d", rank);
    if (request_(s, 'H', NULL, r, strlen(r) + 1, NULL, NULL, timeout_s, "hello", err)) {
        kda_store_close(s, 0);
        return -1;
    }
    *out = s;
    return 0;
}

void kda_store_close(KdaStore *s, double linger_s) {
    if (!s) return;
    if (s->fd >= 0) {
        KdaError e;
        request_(s, 'B', NULL, NULL, 0, NULL, NULL, 2.0, "goodbye", &e);
        close(s->fd);
    }
    if (s->server) {
        double t_end = now_seconds() + linger_s;
        for (;;) { // let the other ranks say goodbye before the server goes away
            pthread_mutex_lock(&s->server->mu);
            int open = 0;
            for (int r = 0; r < s->world; r++)
                open += s->server->state[r] == KDA_STORE_ALIVE;
            pthread_mutex_unlock(&s->server->mu);
            if (!open || now_seconds() >= t_end) break;
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        server_stop_(s->server);
    }
    free(s);
}

int kda_store_set(KdaStore *s, const char *key, const void *val, size_t n, KdaError *err) {
    return request_(s, 'S', key, val, n, NULL, NULL, 60.0, "set", err);
}

int kda_store_get(KdaStore *s, const char *key, void **val, size_t *n, double timeout_s,
                  KdaError *err) {
    char what[160];
    snprintf(what, sizeof what, "waiting for key \"%.100s\"", key);
    return request_(s, 'G', key, NULL, 0, val, n, timeout_s, what, err);
}

int kda_store_peek(KdaStore *s, const char *key, void **val, size_t *n, double timeout_s,
                   KdaError *err) {
    char rop;
    *val = NULL;
    *n = 0;
    if (request_op_(s, 'P', key, NULL, 0, val, n, &rop, timeout_s, "peek", err)) return -1;
    if (rop == 'V') return 1;
    free(*val);
    *val = NULL;
    *n = 0;
    return 0;
}

int kda_store_status(KdaStore *s, char *out, size_t cap, double timeout_s, KdaError *err) {
    void *v;
    size_t n;
    if (cap < (size_t)s->world + 1) return kda_fail(err, "rendezvous: status buffer too small");
    if (request_(s, 'Q', NULL, NULL, 0, &v, &n, timeout_s, "status", err)) return -1;
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(out, v, k);
    out[k] = 0;
    free(v);
    return 0;
}

void kda_store_local_addr(const KdaStore *s, char *out, size_t cap) {
    snprintf(out, cap, "%s", s->local);
}
