// tasks.h - multiple-choice benchmark documents as lm-eval-harness builds them (0-shot), and
// OLMo in-loop request files (data-formats.md §8.1, §8.5, §9).
//
// A document has one loglikelihood request (context, continuation) per choice. For normal
// tasks the context is the prompt and the continuation is " " + choice; for winogrande
// (lm-eval `multiple_inputs`, partial scoring) the contexts differ per option and the
// continuation is the same. Templates (docs/eval.md lists them):
//   arc_easy, arc_challenge  "Question: {question}\nAnswer:"      choices.text, gold by answerKey
//   openbookqa               "{question_stem}"                     choices.text, answerKey.lstrip()
//   piqa                     "Question: {goal}\nAnswer:"           [sol1, sol2], label
//   hellaswag                clean(activity_label: ctx_a Capitalize(ctx_b)); clean(endings), label
//   winogrande               sentence[:i] + option_k (i = index of "_"), cont " " + rest.strip()
//   mmlu                     description + "{question.strip()}\nA. ..\nB. ..\nC. ..\nD.
//   ..\nAnswer:"
//                            with choices "A".."D", answer int (or letter)
//   race                     "Article: {article}\n\n" + earlier Q/A of the article + last question
//
// Sources (eval_task_load, first found wins), for task T in DATA_DIR:
//   DATA_DIR/T.jsonl or DATA_DIR/T.jsonl.gz - JSON lines in the HF dataset's own field layout
//     (mmlu: one file with a "subject" field per row, or DATA_DIR/mmlu/<subject>.jsonl[.gz]);
//   DATA_DIR/[hf_datasets/]<hf path>/<split>/*.arrow - HF `save_to_disk` folders (arrow.h),
//     lm-eval's split first (test for ARC/OBQA/MMLU/RACE, validation for the others), else the
//     other split (the split used is recorded in EvalTask.split).
// OLMo request files: task name "olmo:<task>/<variant>" reads
//   DATA_DIR/oe_eval_tasks/<task>/<variant>/{requests.jsonl.gz, config.json}.
//
// Errors: one line naming the task, the file and the record (line or row), e.g.
//   "arc_easy: data/arc_easy.jsonl:12: answerKey 'E' is not one of choices.label".
#ifndef KDA_EVAL_TASKS_H
#define KDA_EVAL_TASKS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h" // defines: KdaError
#include "core/json.h"  // defines: JsonValue

typedef struct {
    char *context;      // owned UTF-8
    char *continuation; // owned UTF-8, including the leading target delimiter
} EvalRequest;

typedef struct {
    EvalRequest *req; // [n_choices] owned
    int n_choices;
    int gold;          // 0 <= gold < n_choices
    int64_t *norm_len; // [n_choices] code points of choice i (no delimiter): acc_norm divisor
    int subtask;       // index into EvalTask.subtasks (mmlu subject); 0 otherwise
} EvalDoc;

enum { EVAL_ACC = 1, EVAL_ACC_NORM = 2 };

typedef struct {
    char name[64];         // "arc_easy", "mmlu", "olmo:arc_easy/rc_0shot"
    int olmo;              // OLMo request file: context and continuation tokenized separately
    int metrics;           // EVAL_ACC | EVAL_ACC_NORM (what lm-eval's task YAML reports)
    double random;         // chance accuracy in percent
    char source[PATH_MAX]; // file or folder read (the first one for mmlu)
    char split[32];        // split read ("" for JSONL / OLMo)
    int split_fallback;    // 1: lm-eval's split is missing; split is the other one
    char primary[32];      // OLMo config primary_metric ("" otherwise)
    char **subtasks;       // [n_subtasks] owned names (mmlu subjects); NULL otherwise
    int n_subtasks;
    EvalDoc *docs; // [n_docs] owned
    int64_t n_docs;
} EvalTask;

// 1 if name is one of the lm-eval tasks above (not "olmo:...").
int eval_task_known(const char *name);
// Builds one document of task `task` from a row. subject: mmlu subject (NULL: row "subject").
// Errors name the field, without file or record (callers add those).
int eval_build_doc(const char *task, const JsonValue *row, const char *subject, EvalDoc *doc,
                   KdaError *err);
void eval_doc_free(EvalDoc *doc);

// Loads task `name` from data_dir (sources above). limit > 0 keeps the first `limit`
// documents (per subject for mmlu, as lm-eval's --limit does).
int eval_task_load(EvalTask *t, const char *name, const char *data_dir, int64_t limit,
                   KdaError *err);
// Loads task `name` from one JSON-lines file (gzip or plain).
int eval_task_load_jsonl(EvalTask *t, const char *name, const char *path, int64_t limit,
                         KdaError *err);
// Loads an OLMo request folder (requests.jsonl.gz + config.json); unconditional requests
// (doc_id >= 1000000) are skipped.
int eval_task_load_olmo(EvalTask *t, const char *name, const char *dir, int64_t limit,
                        KdaError *err);
void eval_task_free(EvalTask *t); // accepts a zeroed task

// The 57 mmlu subjects and lm-eval's 4 categories (stem, humanities, social_sciences, other).
int eval_mmlu_n_subjects(void);
const char *eval_mmlu_subject(int i);
int eval_mmlu_category(const char *subject); // 0..3, or -1 when unknown
const char *eval_mmlu_category_name(int c);

// Text helpers with Python str semantics (inputs are valid UTF-8). Results are kda_malloc'ed.
char *eval_hellaswag_preprocess(const char *s); // strip, " [title]"->". ", drop [..], "  "->" "
char *eval_py_capitalize(const char *s);        // first code point upper, the rest lower
int64_t eval_py_len(const char *s, size_t n);   // code points
size_t eval_py_rstrip(const char *s, size_t n); // length after str.rstrip()
size_t eval_py_lstrip(const char *s, size_t n); // bytes removed by str.lstrip()

#endif
