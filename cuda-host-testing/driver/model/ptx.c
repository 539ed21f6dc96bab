/*
 * ptx.c - what a module image says: the PTX text in it (plain text, or the PTX entry of a fat
 * binary), and, read from that text, each kernel's name and parameters (their sizes and
 * alignments, by which a launch's arguments are laid out), the static shared and local memory its
 * body declares and its thread limit, and the module's variables in global and constant memory,
 * with their initial values. No code is read: the driver runs a stand-in for each kernel.
 */
#include "internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- The PTX in an image --------------------------------------------------------------------- */

#define FATBIN_MAGIC 0xBA55ED50u          /* a fat binary's header */
#define FATBIN_WRAPPER_MAGIC 0x466243B1u  /* __fatBinC_Wrapper_t, pointing to a fat binary */
#define FATBIN_KIND_PTX 1
/* An entry's flags: its payload is compressed (LZ4 before CUDA 13, Zstandard since). */
#define FATBIN_COMPRESSED (0x2000u | 0x8000u)

static uint16_t read16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t read32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t read64(const unsigned char *p) { return read32(p) | (uint64_t)read32(p + 4) << 32; }

/* A fat binary: a header (magic, version, header size, size of the entries), then entries, each a
 * header (kind, its own size, its payload's size, ..., flags at +0x28) and its payload. */
static CUresult fatbin_ptx(const unsigned char *fatbin, const char **text, size_t *length)
{
    size_t header = read16(fatbin + 6);
    uint64_t size = read64(fatbin + 8);
    bool compressed = false;
    for (uint64_t at = header; at + 0x30 <= header + size;) {
        const unsigned char *entry = fatbin + at;
        uint32_t entry_header = read32(entry + 4);
        uint64_t payload = read64(entry + 8);
        if (entry_header < 0x30)
            return CUDA_ERROR_INVALID_IMAGE;
        if (read16(entry) == FATBIN_KIND_PTX) {
            if ((read64(entry + 0x28) & FATBIN_COMPRESSED) == 0) {
                *text = (const char *)entry + entry_header;
                *length = (size_t)payload;
                return CUDA_SUCCESS;
            }
            compressed = true;
        }
        at += entry_header + payload;
    }
    if (compressed)
        cusw_log("a fat binary holds its PTX compressed, which this driver does not read: build it "
                 "with uncompressed PTX (fatbinary --compress=false, nvcc -Xfatbin=-compress=false)");
    else
        cusw_log("a fat binary holds no PTX, only machine code, which this driver does not read");
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cusw_image_ptx(const void *image, const char **text, size_t *length)
{
    const unsigned char *bytes = image;
    if (read32(bytes) == FATBIN_WRAPPER_MAGIC) {
        const void *data;
        memcpy(&data, bytes + 8, sizeof data);
        return data != NULL ? cusw_image_ptx(data, text, length) : CUDA_ERROR_INVALID_IMAGE;
    }
    if (read32(bytes) == FATBIN_MAGIC)
        return fatbin_ptx(bytes, text, length);
    if (bytes[0] == 0x7f && memcmp(bytes + 1, "ELF", 3) == 0) {
        cusw_log("a module image is machine code (cubin), which this driver does not read: load "
                 "PTX, or a fat binary holding PTX");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *text = image;
    *length = strlen(image);
    return CUDA_SUCCESS;
}

/* ---- Tokens ---------------------------------------------------------------------------------- */

struct lexer {
    const char *at, *end;
    char token[256]; /* the current token, truncated */
    bool ended;
};

static bool word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '.' || c == '%';
}

/* The next token: a word (a directive, a name, a number), a quoted string or one punctuation
 * character; comments and white space are skipped. */
static void next(struct lexer *l)
{
    for (;;) {
        while (l->at < l->end && isspace((unsigned char)*l->at))
            l->at++;
        if (l->at + 1 < l->end && l->at[0] == '/' && l->at[1] == '/') {
            while (l->at < l->end && *l->at != '\n')
                l->at++;
        } else if (l->at + 1 < l->end && l->at[0] == '/' && l->at[1] == '*') {
            l->at += 2;
            while (l->at + 1 < l->end && !(l->at[0] == '*' && l->at[1] == '/'))
                l->at++;
            l->at = l->at + 2 < l->end ? l->at + 2 : l->end;
        } else {
            break;
        }
    }
    if (l->at >= l->end || *l->at == '\0') {
        l->ended = true;
        l->token[0] = '\0';
        return;
    }
    const char *start = l->at;
    if (*l->at == '"') {
        l->at++;
        while (l->at < l->end && *l->at != '"')
            l->at++;
        if (l->at < l->end)
            l->at++;
    } else if (word_char(*l->at)) {
        while (l->at < l->end && word_char(*l->at))
            l->at++;
    } else {
        l->at++;
    }
    size_t n = (size_t)(l->at - start);
    if (n >= sizeof l->token)
        n = sizeof l->token - 1;
    memcpy(l->token, start, n);
    l->token[n] = '\0';
}

static bool is(const struct lexer *l, const char *token) { return strcmp(l->token, token) == 0; }

/* `src` into `dst` of `size` bytes, truncated, NUL-terminated. */
static void copy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Skips to the end of a statement or of a block that opens before it, whichever comes first. */
static void skip_statement(struct lexer *l)
{
    int depth = 0;
    while (!l->ended) {
        if (is(l, "{")) {
            depth++;
        } else if (is(l, "}")) {
            if (--depth <= 0) {
                next(l);
                return;
            }
        } else if (is(l, ";") && depth == 0) {
            next(l);
            return;
        }
        next(l);
    }
}

/* ---- Types ----------------------------------------------------------------------------------- */

/* The bytes of a PTX fundamental type (".u64" 8, ".f16x2" 4, ".e4m3x2" 2, ".pred" 1), or 0 for a
 * token that is no type. */
static size_t type_size(const char *type)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        { ".b8", 1 },    { ".u8", 1 },      { ".s8", 1 },      { ".b16", 2 },     { ".u16", 2 },
        { ".s16", 2 },   { ".f16", 2 },     { ".bf16", 2 },    { ".b32", 4 },     { ".u32", 4 },
        { ".s32", 4 },   { ".f32", 4 },     { ".tf32", 4 },    { ".f16x2", 4 },   { ".bf16x2", 4 },
        { ".b64", 8 },   { ".u64", 8 },     { ".s64", 8 },     { ".f64", 8 },     { ".b128", 16 },
        { ".pred", 1 },  { ".e4m3x2", 2 },  { ".e5m2x2", 2 },  { ".e4m3", 1 },    { ".e5m2", 1 },
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(type, types[i].name) == 0)
            return types[i].size;
    return 0;
}

/* A declaration's qualifiers and name, up to its array bounds: `.align N`, vector and fundamental
 * types, state-space and pointer qualifiers, then the name. */
struct declaration {
    size_t element, align, count;
    unsigned int vector;
    char type[16];
    char name[256];
};

static bool read_declaration(struct lexer *l, struct declaration *d)
{
    *d = (struct declaration){ .count = 1, .vector = 1 };
    while (!l->ended && l->token[0] == '.') {
        if (is(l, ".align")) {
            next(l);
            d->align = strtoull(l->token, NULL, 0);
        } else if (is(l, ".v2") || is(l, ".v4") || is(l, ".v8")) {
            d->vector = (unsigned int)strtoul(l->token + 2, NULL, 10);
        } else if (type_size(l->token) != 0) {
            d->element = type_size(l->token);
            copy(d->type, sizeof d->type, l->token);
        }
        next(l);
    }
    if (l->ended || d->element == 0 || !(isalpha((unsigned char)l->token[0]) ||
                                         l->token[0] == '_' || l->token[0] == '$' ||
                                         l->token[0] == '%'))
        return false;
    copy(d->name, sizeof d->name, l->token);
    next(l);
    while (is(l, "[")) { /* each bound multiplies the count; an empty one counts 1 */
        next(l);
        if (!is(l, "]")) {
            d->count *= strtoull(l->token, NULL, 0);
            next(l);
        }
        if (!is(l, "]"))
            return false;
        next(l);
    }
    if (d->align == 0)
        d->align = d->element * d->vector;
    return true;
}

static size_t declared_bytes(const struct declaration *d)
{
    return d->element * d->vector * d->count;
}

/* ---- Kernels --------------------------------------------------------------------------------- */

static bool push(void **array, size_t *n, size_t *capacity, size_t size)
{
    if (!cusw_reserve(array, capacity, *n + 1, size))
        return false;
    memset((char *)*array + *n * size, 0, size);
    (*n)++;
    return true;
}

/* `(` params `)`: each `.param` declaration. */
static CUresult read_params(struct lexer *l, struct cusw_ptx_entry *e)
{
    size_t capacity = 0;
    next(l); /* ( */
    while (!l->ended && !is(l, ")")) {
        if (!is(l, ".param"))
            return CUDA_ERROR_INVALID_PTX;
        next(l);
        struct declaration d;
        if (!read_declaration(l, &d) ||
            !push((void **)&e->params, &e->n_params, &capacity, sizeof *e->params))
            return CUDA_ERROR_INVALID_PTX;
        struct cusw_ptx_param *p = &e->params[e->n_params - 1];
        p->size = declared_bytes(&d);
        p->align = d.align;
        copy(p->type, sizeof p->type, d.type);
        if (is(l, ","))
            next(l);
    }
    if (l->ended)
        return CUDA_ERROR_INVALID_PTX;
    next(l); /* ) */
    return CUDA_SUCCESS;
}

/* A kernel's body: what its `.shared` and `.local` declarations reserve (the first level of
 * blocks; nested ones share it). */
static void read_body(struct lexer *l, struct cusw_ptx_entry *e)
{
    int depth = 0;
    while (!l->ended) {
        if (is(l, "{")) {
            depth++;
        } else if (is(l, "}")) {
            if (--depth == 0) {
                next(l);
                return;
            }
        } else if (is(l, ".shared") || is(l, ".local")) {
            bool shared = is(l, ".shared");
            next(l);
            struct declaration d;
            if (read_declaration(l, &d)) {
                size_t *bytes = shared ? &e->shared_bytes : &e->local_bytes;
                *bytes = (*bytes + d.align - 1) / d.align * d.align + declared_bytes(&d);
            }
            continue;
        }
        next(l);
    }
}

static CUresult read_entry(struct lexer *l, struct cusw_ptx *ptx, size_t *capacity)
{
    next(l); /* the name */
    if (l->ended || !push((void **)&ptx->entries, &ptx->n_entries, capacity, sizeof *ptx->entries))
        return CUDA_ERROR_INVALID_PTX;
    struct cusw_ptx_entry *e = &ptx->entries[ptx->n_entries - 1];
    e->name = strdup(l->token);
    if (e->name == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    next(l);
    if (is(l, "(")) {
        CUresult rc = read_params(l, e);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    /* Performance directives, up to the body (or the `;` of a declaration without one). */
    while (!l->ended && !is(l, "{") && !is(l, ";")) {
        if (is(l, ".maxntid") || is(l, ".reqntid")) {
            unsigned long threads = 1;
            next(l);
            for (;;) {
                threads *= strtoul(l->token, NULL, 0);
                next(l);
                if (!is(l, ","))
                    break;
                next(l);
            }
            e->max_threads = (int)threads;
            continue;
        }
        next(l);
    }
    if (is(l, "{"))
        read_body(l, e);
    else
        next(l);
    return CUDA_SUCCESS;
}

/* ---- Variables ------------------------------------------------------------------------------- */

/* One initial value, as a `.global` or `.const` initialiser writes it: an integer (decimal, hex,
 * octal), or a float in PTX's hexadecimal form (0f for 32 bits, 0d for 64). */
static uint64_t literal(const char *token, bool *ok)
{
    bool negative = token[0] == '-';
    const char *digits = negative ? token + 1 : token;
    char *end = NULL;
    uint64_t value;
    if ((digits[0] == '0') && (digits[1] == 'f' || digits[1] == 'F' || digits[1] == 'd' ||
                               digits[1] == 'D'))
        value = strtoull(digits + 2, &end, 16);
    else
        value = strtoull(digits, &end, 0);
    *ok = end != NULL && (*end == '\0' || *end == 'U' || *end == 'u');
    return negative ? (uint64_t)0 - value : value;
}

static CUresult read_variable(struct lexer *l, struct cusw_ptx *ptx, size_t *capacity)
{
    next(l); /* past .global or .const */
    struct declaration d;
    if (!read_declaration(l, &d))
        return CUDA_ERROR_INVALID_PTX;
    if (!push((void **)&ptx->globals, &ptx->n_globals, capacity, sizeof *ptx->globals))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct cusw_ptx_global *g = &ptx->globals[ptx->n_globals - 1];
    g->name = strdup(d.name);
    g->size = declared_bytes(&d);
    g->align = d.align;
    g->init = calloc(g->size ? g->size : 1, 1);
    if (g->name == NULL || g->init == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (is(l, "=")) {
        /* Scalars and flat lists; an address (generic(x)) or a nested list leaves zeros. */
        size_t at = 0;
        next(l);
        while (!l->ended && !is(l, ";")) {
            bool ok = false;
            char value[sizeof l->token + 1] = { 0 };
            if (is(l, "-")) {
                next(l);
                value[0] = '-';
            }
            copy(value + (value[0] == '-'), sizeof value - 1, l->token);
            uint64_t bits = literal(value, &ok);
            if (ok && at + d.element <= g->size) {
                memcpy(g->init + at, &bits, d.element); /* little-endian, as the device */
                at += d.element;
            }
            next(l);
        }
    }
    skip_statement(l);
    return CUDA_SUCCESS;
}

/* ---- Modules --------------------------------------------------------------------------------- */

CUresult cusw_ptx_parse(const char *text, size_t length, struct cusw_ptx **out)
{
    struct cusw_ptx *ptx = calloc(1, sizeof *ptx);
    if (ptx == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct lexer l = { .at = text, .end = text + length };
    size_t entries_capacity = 0, globals_capacity = 0;
    bool versioned = false;
    CUresult rc = CUDA_SUCCESS;
    next(&l);
    while (rc == CUDA_SUCCESS && !l.ended) {
        if (is(&l, ".version")) {
            next(&l);
            unsigned long major = strtoul(l.token, NULL, 10);
            const char *dot = strchr(l.token, '.');
            ptx->version = (int)(major * 10 + (dot != NULL ? strtoul(dot + 1, NULL, 10) : 0));
            versioned = true;
            next(&l);
        } else if (is(&l, ".target")) {
            next(&l); /* sm_75, compute_90a: the virtual architecture */
            const char *digits = strpbrk(l.token, "0123456789");
            ptx->target = digits != NULL ? (int)strtol(digits, NULL, 10) : 0;
            next(&l);
        } else if (is(&l, ".entry")) {
            rc = read_entry(&l, ptx, &entries_capacity);
        } else if (is(&l, ".global") || is(&l, ".const")) {
            rc = read_variable(&l, ptx, &globals_capacity);
        } else if (is(&l, ".func") || is(&l, ".section") || is(&l, ".shared") ||
                   is(&l, ".tex") || is(&l, ".surfref") || is(&l, ".texref") ||
                   is(&l, ".samplerref") || is(&l, ".callprototype")) {
            skip_statement(&l);
        } else {
            next(&l); /* .target, .address_size, .file, linkage, ... */
        }
    }
    /* Every PTX module begins with its version: text without one is no PTX. */
    if (rc == CUDA_SUCCESS && !versioned)
        rc = CUDA_ERROR_INVALID_PTX;
    if (rc != CUDA_SUCCESS) {
        cusw_ptx_free(ptx);
        return rc;
    }
    *out = ptx;
    return CUDA_SUCCESS;
}

void cusw_ptx_free(struct cusw_ptx *ptx)
{
    if (ptx == NULL)
        return;
    for (size_t i = 0; i < ptx->n_entries; i++) {
        free(ptx->entries[i].name);
        free(ptx->entries[i].params);
    }
    for (size_t i = 0; i < ptx->n_globals; i++) {
        free(ptx->globals[i].name);
        free(ptx->globals[i].init);
    }
    free(ptx->entries);
    free(ptx->globals);
    free(ptx);
}

long cusw_ptx_entry_index(const struct cusw_ptx *ptx, const char *name)
{
    for (size_t i = 0; i < ptx->n_entries; i++)
        if (strcmp(ptx->entries[i].name, name) == 0)
            return (long)i;
    return -1;
}
