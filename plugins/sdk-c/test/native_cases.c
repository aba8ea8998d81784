/*
 * Runs a C row plugin natively as Weir's host runs its component, for
 * native_tests.py: through the generated bindings' real export functions and their
 * real post-return functions, with every input allocated the way the canonical ABI
 * allocates it (one `malloc` per non-empty string and list; an empty one points at
 * its alignment, not at an allocation). Built with AddressSanitizer, this checks the
 * ownership rules of weir_plugin.h on every path: a leak, a double free or a free of
 * something the plugin does not own fails the run.
 *
 * On the contract the bindings are of (0.2, or 0.1 with WEIR_CONTRACT_0_1 defined),
 * compiled as one translation unit with the plugin's source:
 *
 *   clang -fsanitize=address,undefined -I GEN -I plugins/sdk-c \
 *       -DWEIR_TEST_PLUGIN_SOURCE='"plugins/examples/orders-c/orders.c"' \
 *       -Dexports_weir_transform_0_2_0_transform_session_new=weir_test_session_new \
 *       plugins/sdk-c/test/native_cases.c GEN/transformer.c
 *
 * (0.1: -DWEIR_CONTRACT_0_1, -Dexports_weir_transform_transform_session_new=...,
 * GEN/plugin.c; the generated resource intrinsics pass the session pointer as a
 * 32-bit handle, which holds a wasm32 pointer but not a native one: the rename hands
 * the session to this harness instead).
 *
 * Reads cases from stdin and writes results to stdout in a flat text form (strings
 * as `x` + hex, so that any bytes survive); native_tests.py converts from and to the
 * JSON of the case files. Tokens:
 *
 *   in:  describe
 *        0.1: case part STR STR config N (STR STR)*N chunks M (rows R ROW*R)*M
 *             ROW = OP POSITION HAS_TIME TIME NKEY VALUE*NKEY NCOL (STR VALUE)*NCOL
 *        0.2: case part STR STR schema NCOL (STR STR)*NCOL NKEY INT*NKEY
 *             config N (STR STR)*N chunks M (rows R ROW*R)*M
 *             ROW = OP POSITION HAS_TIME TIME NKEY VALUE*NKEY NCOL (- | VALUE)*NCOL
 *             (a schema column is a name and a type name; `-` is a value the row
 *             does not have)
 *   out: columns N STR*N
 *        ok rows R (N VALUE*N)*R rejections J (NKEY VALUE*NKEY STR)*J
 *        err TAG STR
 *   VALUE = n | b 0/1 | i INT | f HEX64 | t STR | y STR | d STR | D INT | T INT |
 *           j STR | u STR STR
 *
 * On 0.2 a call whose output says `more` is followed by `next` calls until one
 * says not, as the host does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef WEIR_TEST_PLUGIN_SOURCE
#error "define WEIR_TEST_PLUGIN_SOURCE as the plugin's C file"
#endif
#include WEIR_TEST_PLUGIN_SOURCE

#include "native_stubs.h"

/* The generated export functions and post-return functions. */
#define EXPORT(name) WEIR_GEN_EXPORTS(name)
#ifdef WEIR_CONTRACT_0_1
#define WASM_EXPORT(name) __wasm_export_exports_weir_transform_transform_##name
#else
#define WASM_EXPORT(name) __wasm_export_exports_weir_transform_0_2_0_transform_##name
#endif
uint8_t *WASM_EXPORT(describe)(void);
void WASM_EXPORT(describe_post_return)(uint8_t *);
#ifdef WEIR_CONTRACT_0_1
int32_t WASM_EXPORT(constructor_session)(uint8_t *, size_t, uint8_t *, size_t, uint8_t *, size_t);
#else
int32_t WASM_EXPORT(constructor_session)(uint8_t *, size_t, uint8_t *, size_t, uint8_t *, size_t,
                                         uint8_t *, size_t, uint8_t *, size_t);
uint8_t *WASM_EXPORT(method_session_next)(uint8_t *);
void WASM_EXPORT(method_session_next_post_return)(uint8_t *);
#endif
uint8_t *WASM_EXPORT(method_session_push)(uint8_t *, uint8_t *, size_t);
void WASM_EXPORT(method_session_push_post_return)(uint8_t *);
uint8_t *WASM_EXPORT(method_session_finish)(uint8_t *);
void WASM_EXPORT(method_session_finish_post_return)(uint8_t *);
void WASM_EXPORT(session_dtor)(EXPORT(session_t) *);

/* The session the constructor made (see the rename above). */
static EXPORT(session_t) *current_session;

EXPORT(own_session_t) weir_test_session_new(EXPORT(session_t) *rep) {
    current_session = rep;
    EXPORT(own_session_t) handle = {1};
    return handle;
}

/* ---- reading ---- */

static char *buf;
static size_t cap;
/* Whether the last token is to be read again. */
static bool pushed_back;

static char *token(void) {
    size_t n = 0;
    int c;
    if (pushed_back) {
        pushed_back = false;
        return buf;
    }
    while ((c = getchar()) != EOF && (c == ' ' || c == '\n' || c == '\t' || c == '\r')) {
    }
    if (c == EOF) {
        return NULL;
    }
    do {
        if (n + 1 >= cap) {
            cap = cap == 0 ? 256 : 2 * cap;
            buf = realloc(buf, cap);
            if (buf == NULL) {
                abort();
            }
        }
        buf[n++] = (char)c;
    } while ((c = getchar()) != EOF && c != ' ' && c != '\n' && c != '\t' && c != '\r');
    buf[n] = '\0';
    return buf;
}

static void fail(const char *what) {
    fprintf(stderr, "native_cases: bad input: %s\n", what);
    exit(2);
}

static char *expect_token(void) {
    char *t = token();
    if (t == NULL) {
        fail("unexpected end");
    }
    return t;
}

static void expect(const char *word) {
    if (strcmp(expect_token(), word) != 0) {
        fail(word);
    }
}

static long long read_int(void) {
    return strtoll(expect_token(), NULL, 10);
}

static unsigned long long read_uint(void) {
    return strtoull(expect_token(), NULL, 10);
}

/* Memory as the host's lowering hands it over: its own allocation when non-empty,
 * the alignment (never an allocation) when empty. */
static void *host_alloc(size_t size, size_t align) {
    if (size == 0) {
        return (void *)(uintptr_t)align;
    }
    void *p = malloc(size);
    if (p == NULL) {
        abort();
    }
    return p;
}

static weir_string read_str(void) {
    const char *t = expect_token();
    if (t[0] != 'x') {
        fail("string");
    }
    size_t len = (strlen(t) - 1) / 2;
    weir_string s = {host_alloc(len, 1), len};
    for (size_t i = 0; i < len; i++) {
        unsigned byte;
        if (sscanf(t + 1 + 2 * i, "%2x", &byte) != 1) {
            fail("hex");
        }
        s.ptr[i] = (uint8_t)byte;
    }
    return s;
}

static weir_value read_value(void) {
    weir_value v;
    memset(&v, 0, sizeof v);
    const char *t = expect_token();
    switch (t[0]) {
    case 'n':
        v.tag = WEIR_VALUE_NULL;
        break;
    case 'b':
        v.tag = WEIR_VALUE_BOOLEAN;
        v.val.boolean = read_int() != 0;
        break;
    case 'i':
        v.tag = WEIR_VALUE_INTEGER;
        v.val.integer = read_int();
        break;
    case 'f': {
        uint64_t bits = strtoull(expect_token(), NULL, 16);
        v.tag = WEIR_VALUE_FLOAT;
        memcpy(&v.val.float_, &bits, sizeof bits);
        break;
    }
    case 't':
        v.tag = WEIR_VALUE_TEXT;
        v.val.text = read_str();
        break;
    case 'y': {
        weir_string s = read_str();
        v.tag = WEIR_VALUE_BYTES;
        v.val.bytes.ptr = s.ptr;
        v.val.bytes.len = s.len;
        break;
    }
    case 'd':
        v.tag = WEIR_VALUE_DECIMAL;
        v.val.decimal = read_str();
        break;
    case 'D':
        v.tag = WEIR_VALUE_DATE;
        v.val.date = (int32_t)read_int();
        break;
    case 'T':
        v.tag = WEIR_VALUE_TIMESTAMP;
        v.val.timestamp = read_int();
        break;
    case 'j':
        v.tag = WEIR_VALUE_JSON;
        v.val.json = read_str();
        break;
    case 'u':
        v.tag = WEIR_VALUE_UNSUPPORTED;
        v.val.unsupported.type_name = read_str();
        v.val.unsupported.text = read_str();
        break;
    default:
        fail("value");
    }
    return v;
}

static weir_staged_row read_row(void) {
    weir_staged_row row;
    memset(&row, 0, sizeof row);
    expect("row");
    row.op = (uint8_t)read_int();
    row.commit_position = read_uint();
    row.commit_time.is_some = read_int() != 0;
    row.commit_time.val = read_int();
    size_t nkey = (size_t)read_uint();
    row.key.ptr = host_alloc(nkey * sizeof(weir_value), 8);
    row.key.len = nkey;
    for (size_t i = 0; i < nkey; i++) {
        row.key.ptr[i] = read_value();
    }
    size_t ncol = (size_t)read_uint();
#ifdef WEIR_CONTRACT_0_1
    row.columns.ptr = host_alloc(ncol * sizeof(EXPORT(column_value_t)), 8);
    row.columns.len = ncol;
    for (size_t i = 0; i < ncol; i++) {
        row.columns.ptr[i].name = read_str();
        row.columns.ptr[i].value = read_value();
    }
#else
    row.values.ptr = host_alloc(ncol * sizeof(EXPORT(option_value_t)), 8);
    row.values.len = ncol;
    for (size_t i = 0; i < ncol; i++) {
        EXPORT(option_value_t) *slot = &row.values.ptr[i];
        memset(slot, 0, sizeof *slot);
        char *t = expect_token();
        if (strcmp(t, "-") == 0) {
            slot->is_some = false;
        } else {
            /* Not a `-`: the token starts a value; read it again as one. */
            (void)t;
            pushed_back = true;
            slot->is_some = true;
            slot->val = read_value();
        }
    }
#endif
    return row;
}

/* ---- writing (into a growing buffer: a case's output is printed whole) ---- */

static char *out_buf;
static size_t out_len, out_cap;

static void put(const char *s, size_t n) {
    if (out_len + n + 1 > out_cap) {
        out_cap = 2 * (out_len + n + 1);
        out_buf = realloc(out_buf, out_cap);
        if (out_buf == NULL) {
            abort();
        }
    }
    memcpy(out_buf + out_len, s, n);
    out_len += n;
    out_buf[out_len] = '\0';
}

static void put_s(const char *s) {
    put(s, strlen(s));
}

static void put_fmt_ll(const char *prefix, long long v) {
    char b[64];
    snprintf(b, sizeof b, "%s%lld ", prefix, v);
    put_s(b);
}

static void put_str(const uint8_t *p, size_t len) {
    static const char hex[] = "0123456789abcdef";
    put_s("x");
    for (size_t i = 0; i < len; i++) {
        char b[2] = {hex[p[i] >> 4], hex[p[i] & 15]};
        put(b, 2);
    }
    put_s(" ");
}

static void put_value(const weir_value *v) {
    switch (v->tag) {
    case WEIR_VALUE_NULL:
        put_s("n ");
        break;
    case WEIR_VALUE_BOOLEAN:
        put_fmt_ll("b ", v->val.boolean);
        break;
    case WEIR_VALUE_INTEGER:
        put_fmt_ll("i ", v->val.integer);
        break;
    case WEIR_VALUE_FLOAT: {
        uint64_t bits;
        char b[40];
        memcpy(&bits, &v->val.float_, sizeof bits);
        snprintf(b, sizeof b, "f %016" PRIx64 " ", bits);
        put_s(b);
        break;
    }
    case WEIR_VALUE_TEXT:
        put_s("t ");
        put_str(v->val.text.ptr, v->val.text.len);
        break;
    case WEIR_VALUE_BYTES:
        put_s("y ");
        put_str(v->val.bytes.ptr, v->val.bytes.len);
        break;
    case WEIR_VALUE_DECIMAL:
        put_s("d ");
        put_str(v->val.decimal.ptr, v->val.decimal.len);
        break;
    case WEIR_VALUE_DATE:
        put_fmt_ll("D ", v->val.date);
        break;
    case WEIR_VALUE_TIMESTAMP:
        put_fmt_ll("T ", v->val.timestamp);
        break;
    case WEIR_VALUE_JSON:
        put_s("j ");
        put_str(v->val.json.ptr, v->val.json.len);
        break;
    case WEIR_VALUE_UNSUPPORTED:
        put_s("u ");
        put_str(v->val.unsupported.type_name.ptr, v->val.unsupported.type_name.len);
        put_str(v->val.unsupported.text.ptr, v->val.unsupported.text.len);
        break;
    default:
        put_s("? ");
    }
}

/* A slot of the return area: the generated code lays it out in pointer-sized
 * slots, natively as in wasm32. */
#define SLOT(area, k) ((area) + (k) * sizeof(void *))

/* The output gathered over a case's calls. */
typedef struct gathered {
    char *rows, *rejections;
    size_t rows_len, rejections_len, nrows, nrejections;
} gathered;

/* Appends a call's rows and rejections to `g`, or returns false with the error
 * written to `out_buf`. `*more` is the output's `more` (always false on 0.1). */
static bool take_push_result(uint8_t *area, gathered *g, bool *more) {
    *more = false;
    if (*area != 0) {
        uint8_t tag = *SLOT(area, 1);
        uint8_t *ptr = *(uint8_t **)SLOT(area, 2);
        size_t len = *(size_t *)SLOT(area, 3);
        out_len = 0;
        put_fmt_ll("err ", tag);
        put_str(ptr, len);
        return false;
    }
    EXPORT(row_t) *r = *(EXPORT(row_t) **)SLOT(area, 1);
    size_t nr = *(size_t *)SLOT(area, 2);
    EXPORT(rejection_t) *j = *(EXPORT(rejection_t) **)SLOT(area, 3);
    size_t nj = *(size_t *)SLOT(area, 4);
#ifndef WEIR_CONTRACT_0_1
    *more = *SLOT(area, 5) != 0;
#endif
    for (size_t i = 0; i < nr; i++) {
        out_len = 0;
        put_fmt_ll("", (long long)r[i].len);
        for (size_t k = 0; k < r[i].len; k++) {
            put_value(&r[i].ptr[k]);
        }
        g->rows = realloc(g->rows, g->rows_len + out_len + 1);
        memcpy(g->rows + g->rows_len, out_buf, out_len + 1);
        g->rows_len += out_len;
    }
    g->nrows += nr;
    for (size_t i = 0; i < nj; i++) {
        out_len = 0;
        put_fmt_ll("", (long long)j[i].key.len);
        for (size_t k = 0; k < j[i].key.len; k++) {
            put_value(&j[i].key.ptr[k]);
        }
        put_str(j[i].reason.ptr, j[i].reason.len);
        g->rejections = realloc(g->rejections, g->rejections_len + out_len + 1);
        memcpy(g->rejections + g->rejections_len, out_buf, out_len + 1);
        g->rejections_len += out_len;
    }
    g->nrejections += nj;
    return true;
}

/* Takes a `push` or `finish` result and its post-return, then (0.2) drains its
 * parts with `next` while one says `more`. */
static bool take_all(uint8_t *area, void (*post_return)(uint8_t *), gathered *g) {
    bool more;
    bool ok = take_push_result(area, g, &more);
    post_return(area);
#ifndef WEIR_CONTRACT_0_1
    while (ok && more) {
        area = WASM_EXPORT(method_session_next)((uint8_t *)current_session);
        ok = take_push_result(area, g, &more);
        WASM_EXPORT(method_session_next_post_return)(area);
    }
#endif
    return ok;
}

static void run_case(void) {
    expect("part");
    weir_string table = read_str();
    weir_string name = read_str();
#ifndef WEIR_CONTRACT_0_1
    expect("schema");
    size_t ncolumns = (size_t)read_uint();
    EXPORT(input_column_t) *columns = host_alloc(ncolumns * sizeof(EXPORT(input_column_t)), 8);
    for (size_t i = 0; i < ncolumns; i++) {
        columns[i].name = read_str();
        columns[i].type_name = read_str();
    }
    size_t nkey = (size_t)read_uint();
    uint32_t *key = host_alloc(nkey * sizeof(uint32_t), 4);
    for (size_t i = 0; i < nkey; i++) {
        key[i] = (uint32_t)read_uint();
    }
#endif
    expect("config");
    size_t nconfig = (size_t)read_uint();
    weir_config_entry *config = host_alloc(nconfig * sizeof(weir_config_entry), 8);
    for (size_t i = 0; i < nconfig; i++) {
        config[i].f0 = read_str();
        config[i].f1 = read_str();
    }
    current_session = NULL;
#ifdef WEIR_CONTRACT_0_1
    WASM_EXPORT(constructor_session)(table.ptr, table.len, name.ptr, name.len, (uint8_t *)config,
                                     nconfig);
#else
    WASM_EXPORT(constructor_session)(table.ptr, table.len, name.ptr, name.len, (uint8_t *)columns,
                                     ncolumns, (uint8_t *)key, nkey, (uint8_t *)config, nconfig);
#endif
    if (current_session == NULL) {
        fail("the constructor made no session");
    }

    gathered g = {NULL, NULL, 0, 0, 0, 0};
    bool ok = true;
    expect("chunks");
    size_t nchunks = (size_t)read_uint();
    for (size_t c = 0; c < nchunks; c++) {
        expect("rows");
        size_t n = (size_t)read_uint();
        weir_staged_row *chunk = host_alloc(n * sizeof(weir_staged_row), 8);
        for (size_t i = 0; i < n; i++) {
            chunk[i] = read_row();
        }
        if (!ok) {
            /* After an error the host pushes nothing more: free what was read. */
            weir_staged_rows list = {chunk, n};
            EXPORT(list_staged_row_free)(&list);
            continue;
        }
        uint8_t *area = WASM_EXPORT(method_session_push)((uint8_t *)current_session,
                                                         (uint8_t *)chunk, n);
        ok = take_all(area, WASM_EXPORT(method_session_push_post_return), &g);
    }
    if (ok) {
        uint8_t *area = WASM_EXPORT(method_session_finish)((uint8_t *)current_session);
        ok = take_all(area, WASM_EXPORT(method_session_finish_post_return), &g);
    }
    WASM_EXPORT(session_dtor)(current_session);
    current_session = NULL;

    if (ok) {
        printf("ok rows %zu %s rejections %zu %s\n", g.nrows, g.rows ? g.rows : "",
               g.nrejections, g.rejections ? g.rejections : "");
    } else {
        printf("%s\n", out_buf);
    }
    free(g.rows);
    free(g.rejections);
}

static void describe(void) {
    uint8_t *area = WASM_EXPORT(describe)();
    EXPORT(column_t) *columns = *(EXPORT(column_t) **)SLOT(area, 5);
    size_t n = *(size_t *)SLOT(area, 6);
    out_len = 0;
    put_fmt_ll("columns ", (long long)n);
    for (size_t i = 0; i < n; i++) {
        put_str(columns[i].name.ptr, columns[i].name.len);
    }
    printf("%s\n", out_buf);
    WASM_EXPORT(describe_post_return)(area);
}

int main(void) {
    const char *t;
    while ((t = token()) != NULL) {
        if (strcmp(t, "describe") == 0) {
            describe();
        } else if (strcmp(t, "case") == 0) {
            run_case();
        } else {
            fail(t);
        }
        fflush(stdout);
    }
    free(out_buf);
    return 0;
}
