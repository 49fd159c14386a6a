# shellcheck shell=bash
# random_init.sh - sourced by bench/eval/device_decode.sh and hellaswag_gpu.sh: a checkpoint of a
# model with random weights in a given shape, made the way a user would: one `kda train` step at
# learning rate 0 on a little tokenized text (AdamW with lr 0 leaves the initialization as it is).
#
#   kda_random_init KDA_BIN CONFIG DEVICE WORKDIR LOG   # -> WORKDIR/ckpt; 0, or 1 with LOG's tail
# TEXT (default assets/text/moby_dick.txt) is the text tokenized; WORKDIR/ckpt is replaced.
kda_random_init() {
    local kda=$1 config=$2 device=$3 w=$4 log=$5
    local tok=assets/tokenizers/llama3/tokenizer.json
    "$kda" tokenize --tokenizer $tok --input "${TEXT:-assets/text/moby_dick.txt}" \
        --output-prefix "$w/text" --quiet || return 1
    cat > "$w/init.yaml" << YAML
model: $config
train_data_path:
  - $w/text
valid_data_path: null
split: "100,0,0"
seq_length: 128
train_iters: 1
global_batch_size: 1
micro_batch_size: 1
lr: 0.0
min_lr: 0.0
lr_warmup_iters: 0
save: $w/ckpt
eval_interval: 0
eval_iters: 0
device: $device
YAML
    rm -rf "$w/ckpt"
    "$kda" train --config "$w/init.yaml" --no-progress --quiet > "$log" 2>&1 || {
        tail -20 "$log"
        rm -rf "$w/ckpt"
        return 1
    }
}
