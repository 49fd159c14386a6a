// test_cli_megatron.c - Megatron's preprocess_data.py habits in `kda tokenize`: --json-keys,
// --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR, --tokenizer DIR, and
// PREFIX_<key>_document names (--megatron-names); the ids equal those of the plain form.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/util.h"
#include "test.h"

static char g_out[1 << 14];

static int kda_(const char *args) {
    return test_run_kda(g_out, sizeof g_out, NULL, args);
}

KDA_TEST(cli_megatron_tokenize_habits) {
    const char *d = test_tmpdir();
    char docs[4096], args[12288], a[4096], b[4096];
    path_join(docs, sizeof docs, d, "docs.jsonl");
    const char *text = "{\"content\": \"The quick brown fox\"}\n{\"content\": \"Hello\"}\n";
    KdaError err;
    CHECK(write_file_atomic(docs, text, strlen(text), &err) == 0);
    snprintf(args, sizeof args,
             "tokenize --input %s --output-prefix %s/mega --json-keys content --tokenizer-type "
             "HuggingFaceTokenizer --tokenizer-model assets/tokenizers/llama3 --megatron-names "
             "--quiet",
             docs, d);
    CHECK_MSG(kda_(args) == 0, "%s", g_out);
    snprintf(a, sizeof a, "%s/mega_content_document.bin", d);
    CHECK(path_exists(a));
    snprintf(args, sizeof args,
             "tokenize --input %s --output-prefix %s/plain --json-key content --tokenizer "
             "assets/tokenizers/llama3/tokenizer.json --quiet",
             docs, d);
    CHECK_MSG(kda_(args) == 0, "%s", g_out);
    snprintf(b, sizeof b, "%s/plain.bin", d);
    CHECK(test_files_equal(a, b)); // the same ids (BOS from the template included)
    snprintf(args, sizeof args,
             "tokenize --input %s --output-prefix %s/dir --json-key content --tokenizer "
             "assets/tokenizers/llama3 --quiet",
             docs, d);
    CHECK_MSG(kda_(args) == 0, "%s", g_out); // --tokenizer DIR
    snprintf(a, sizeof a, "%s/dir.bin", d);
    CHECK(test_files_equal(a, b));
    snprintf(args, sizeof args,
             "tokenize --input %s --output-prefix %s/x --tokenizer-type SentencePieceTokenizer "
             "--tokenizer-model assets/tokenizers/llama3",
             docs, d);
    CHECK(kda_(args) == 2 && strstr(g_out, "HuggingFaceTokenizer"));
    snprintf(args, sizeof args, "tokenize --input %s --output-prefix %s/x --json-keys a b", docs,
             d);
    CHECK(kda_(args) == 2);
    snprintf(args, sizeof args, "tokenize --input %s --output-prefix %s/x", docs, d);
    CHECK(kda_(args) == 2 && strstr(g_out, "missing --tokenizer"));
}
