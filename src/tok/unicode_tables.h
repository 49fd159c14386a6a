// unicode_tables.h - code point classes of the pre-tokenizer regexes (generated tables).
// Classes come from the regex engine HF tokenizers uses (see tools/gen_unicode_tables.py).
#ifndef KDA_TOK_UNICODE_TABLES_H
#define KDA_TOK_UNICODE_TABLES_H

#include <stdint.h>

enum { TOK_UC_L = 1, TOK_UC_N = 2, TOK_UC_S = 4 }; // \p{L}, \p{N}, \s

extern const uint16_t tok_uc_index[0x1100];
extern const uint8_t tok_uc_blocks[][256];

// Class bits of code point cp (0 for cp > 0x10FFFF).
static inline unsigned tok_uc_class(uint32_t cp) {
    if (cp > 0x10FFFF) return 0;
    return tok_uc_blocks[tok_uc_index[cp >> 8]][cp & 255];
}

#endif
