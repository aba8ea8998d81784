/*
 * Input rows for the native unit tests, on the contract being built (0.2, or 0.1
 * with WEIR_CONTRACT_0_1), from the same description: column names and values.
 * Include after weir_plugin.h; C11 or C++20.
 *
 *   - `weir_test_row`: a borrowed `weir_input` view for the getters (on 0.2 with a
 *     schema of the names; on 0.1 the named columns), over values the caller keeps;
 *   - `weir_test_staged`: one staged row as the host hands it to `push` (every
 *     string and list its own allocation, deep copies), and
 *     `weir_test_open` opens a driver session (on 0.2 with an input schema of the
 *     names, allocated as the host would).
 *
 * A value whose tag is WEIR_TEST_ABSENT is a column the row has no value for: on
 * 0.2 `none` at its position, on 0.1 left out of the row's columns.
 */
#ifndef WEIR_TEST_ROWS_H
#define WEIR_TEST_ROWS_H

#include <stdlib.h>
#include <string.h>

#define WEIR_TEST_ABSENT 0xff

static inline weir_string weir_test_lit(const char *s) {
    weir_string out = {(uint8_t *)(uintptr_t)s, strlen(s)};
    return out;
}

/* A host allocation: `size` bytes, or the alignment (no allocation) when 0. */
static inline void *weir_test_host_alloc(size_t size, size_t align) {
    if (size == 0) {
        return (void *)(uintptr_t)align;
    }
    void *p = malloc(size);
    if (p == NULL) {
        abort();
    }
    return p;
}

/* A host-allocated copy of `s` (the alignment when empty). */
static inline weir_string weir_test_host_str(const char *s) {
    size_t n = strlen(s);
    weir_string out = {(uint8_t *)weir_test_host_alloc(n, 1), n};
    if (n > 0) {
        memcpy(out.ptr, s, n);
    }
    return out;
}

/* A host-allocated copy of an owned or borrowed string. */
static inline weir_string weir_test_host_copy(const weir_string *s) {
    weir_string out = {(uint8_t *)weir_test_host_alloc(s->len, 1), s->len};
    if (s->len > 0) {
        memcpy(out.ptr, s->ptr, s->len);
    }
    return out;
}

/* A host-allocated deep copy of a value. */
static inline weir_value weir_test_host_value(const weir_value *v) {
    weir_value out = *v;
    switch (v->tag) {
    case WEIR_VALUE_TEXT:
    case WEIR_VALUE_DECIMAL:
    case WEIR_VALUE_JSON:
        /* text, decimal and json hold one string at the same place. */
        out.val.text = weir_test_host_copy(&v->val.text);
        break;
    case WEIR_VALUE_BYTES: {
        weir_string b = {(uint8_t *)v->val.bytes.ptr, v->val.bytes.len};
        weir_string copy = weir_test_host_copy(&b);
        out.val.bytes.ptr = copy.ptr;
        out.val.bytes.len = copy.len;
        break;
    }
    case WEIR_VALUE_UNSUPPORTED:
        out.val.unsupported.type_name = weir_test_host_copy(&v->val.unsupported.type_name);
        out.val.unsupported.text = weir_test_host_copy(&v->val.unsupported.text);
        break;
    default:
        break;
    }
    return out;
}

#ifndef WEIR_CONTRACT_0_1
/* An input schema of `names` (type names empty but the first, `bigint`, so that
 * both an allocated and an empty one are freed), allocated as the host would. */
static inline weir_input_schema weir_test_host_schema(const char *const *names, size_t n) {
    weir_input_schema s;
    s.columns.ptr = (WEIR_GEN_EXPORTS(input_column_t) *)weir_test_host_alloc(
        n * sizeof(WEIR_GEN_EXPORTS(input_column_t)), 8);
    s.columns.len = n;
    for (size_t i = 0; i < n; i++) {
        s.columns.ptr[i].name = weir_test_host_str(names[i]);
        s.columns.ptr[i].type_name = weir_test_host_str(i == 0 ? "bigint" : "");
    }
    s.key.ptr = (uint32_t *)weir_test_host_alloc(n > 0 ? sizeof(uint32_t) : 0, 4);
    s.key.len = n > 0 ? 1 : 0;
    if (n > 0) {
        s.key.ptr[0] = 0;
    }
    return s;
}
#endif

/* A borrowed row view over `values` (kept by the caller) named `names`. */
typedef struct weir_test_row {
    weir_input input;
    size_t n;
#ifndef WEIR_CONTRACT_0_1
    weir_schema schema;
#endif
} weir_test_row;

static inline void weir_test_row_init(weir_test_row *t, const char *const *names,
                                      const weir_value *values, size_t n) {
    memset(t, 0, sizeof *t);
    t->n = n;
#ifdef WEIR_CONTRACT_0_1
    t->input.columns.ptr = (WEIR_GEN_EXPORTS(column_value_t) *)weir_test_host_alloc(
        n * sizeof(WEIR_GEN_EXPORTS(column_value_t)), 8);
    for (size_t i = 0; i < n; i++) {
        if (values[i].tag != WEIR_TEST_ABSENT) {
            WEIR_GEN_EXPORTS(column_value_t) *c = &t->input.columns.ptr[t->input.columns.len++];
            c->name = weir_test_lit(names[i]);
            c->value = values[i];
        }
    }
#else
    weir_input_schema host = weir_test_host_schema(names, n);
    weir_schema_init(&t->schema, &host);
    t->input.values.ptr = (WEIR_GEN_EXPORTS(option_value_t) *)weir_test_host_alloc(
        n * sizeof(WEIR_GEN_EXPORTS(option_value_t)), 8);
    t->input.values.len = n;
    for (size_t i = 0; i < n; i++) {
        memset(&t->input.values.ptr[i], 0, sizeof t->input.values.ptr[i]);
        t->input.values.ptr[i].is_some = values[i].tag != WEIR_TEST_ABSENT;
        if (t->input.values.ptr[i].is_some) {
            t->input.values.ptr[i].val = values[i];
        }
    }
    t->input.schema = &t->schema;
#endif
}

/* Frees what `weir_test_row_init` allocated (not the values). */
static inline void weir_test_row_free(weir_test_row *t) {
#ifdef WEIR_CONTRACT_0_1
    if (t->n > 0) {
        free(t->input.columns.ptr);
    }
#else
    if (t->n > 0) {
        free(t->input.values.ptr);
    }
    weir_schema_free(&t->schema);
#endif
    memset(t, 0, sizeof *t);
}

/* One staged row of `t`'s columns with `key` (one integer), allocated as the host
 * would: a list the driver's `push` takes over. */
static inline weir_staged_rows weir_test_staged(const weir_test_row *t, int64_t key, uint8_t op) {
    weir_staged_row *row = (weir_staged_row *)weir_test_host_alloc(sizeof(weir_staged_row), 8);
    memset(row, 0, sizeof *row);
    row->op = op;
    row->commit_position = 42;
    row->commit_time.is_some = true;
    row->commit_time.val = 7;
    row->key.ptr = (weir_value *)weir_test_host_alloc(sizeof(weir_value), 8);
    row->key.len = 1;
    memset(row->key.ptr, 0, sizeof(weir_value));
    row->key.ptr[0].tag = WEIR_VALUE_INTEGER;
    row->key.ptr[0].val.integer = key;
#ifdef WEIR_CONTRACT_0_1
    size_t n = t->input.columns.len;
    row->columns.ptr = (WEIR_GEN_EXPORTS(column_value_t) *)weir_test_host_alloc(
        n * sizeof(WEIR_GEN_EXPORTS(column_value_t)), 8);
    row->columns.len = n;
    for (size_t i = 0; i < n; i++) {
        const weir_string *name = &t->input.columns.ptr[i].name;
        row->columns.ptr[i].name.len = name->len;
        row->columns.ptr[i].name.ptr = (uint8_t *)weir_test_host_alloc(name->len, 1);
        if (name->len > 0) {
            memcpy(row->columns.ptr[i].name.ptr, name->ptr, name->len);
        }
        row->columns.ptr[i].value = weir_test_host_value(&t->input.columns.ptr[i].value);
    }
#else
    size_t n = t->input.values.len;
    row->values.ptr = (WEIR_GEN_EXPORTS(option_value_t) *)weir_test_host_alloc(
        n * sizeof(WEIR_GEN_EXPORTS(option_value_t)), 8);
    row->values.len = n;
    for (size_t i = 0; i < n; i++) {
        row->values.ptr[i] = t->input.values.ptr[i];
        if (row->values.ptr[i].is_some) {
            row->values.ptr[i].val = weir_test_host_value(&t->input.values.ptr[i].val);
        }
    }
#endif
    weir_staged_rows list = {row, 1};
    return list;
}

/* Opens a driver session of `p` for partition (`table`, `name`) with `config`
 * (`nconfig` key/value pairs) and, on 0.2, a schema of `names`; everything
 * allocated as the host would. */
static inline weir_row_session *weir_test_open(const weir_row_plugin *p, const char *table,
                                               const char *name, const char *const *config,
                                               size_t nconfig, const char *const *names,
                                               size_t n) {
    weir_partition partition;
    partition.table = weir_test_host_str(table);
    partition.name = weir_test_host_str(name);
    weir_config c;
    c.ptr = (weir_config_entry *)weir_test_host_alloc(nconfig * sizeof(weir_config_entry), 8);
    c.len = nconfig;
    for (size_t i = 0; i < nconfig; i++) {
        c.ptr[i].f0 = weir_test_host_str(config[2 * i]);
        c.ptr[i].f1 = weir_test_host_str(config[2 * i + 1]);
    }
#ifdef WEIR_CONTRACT_0_1
    (void)names, (void)n;
    return weir_row_plugin_open(p, &partition, &c);
#else
    weir_input_schema schema = weir_test_host_schema(names, n);
    return weir_row_plugin_open(p, &partition, &schema, &c);
#endif
}

#endif
