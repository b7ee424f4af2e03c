/*
 * simcore.c: device memory, copy engines, errors, counters, faults, strict mode.
 *
 * Device memory is a private address space: an allocation gets an address in a
 * range that is not a valid host pointer (dereferencing it on the host faults),
 * backed by a private host block that only this file touches.  Addresses are
 * handed out by a bump pointer and never reused, with a guard gap between
 * allocations, so a use-after-free or an overrun is reported as a bad address
 * instead of silently reading another tensor.
 */
#define _GNU_SOURCE
#include "simcore.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GRANULE 256u        /* capacity is charged in units of this */
#define GUARD 4096u         /* unmapped gap between two allocations */
#define MAX_KERNELS SIM_MAX_KERNELS
#define MAX_FAULTS 16

typedef struct {
    uint64_t va;       /* device address of byte 0 */
    uint64_t size;     /* bytes the caller asked for */
    uint64_t charged;  /* bytes counted against capacity */
    char *host;        /* private backing store, or the user's memory if mapped */
    int mapped;
} alloc_entry;

typedef struct {
    char name[SIM_KERNEL_NAME_LEN];
    uint64_t count;
} kernel_counter;

typedef struct {
    char name[SIM_KERNEL_NAME_LEN];
    uint64_t nth;       /* 1-based call that fails */
    int and_after;      /* "name:N+" fails call N and every later one */
    uint64_t seen;
} fault_rule;

static struct {
    const char *chip;
    const char *env_prefix;
    uint64_t va_base;
    uint64_t default_capacity;
    int initialized;
    int strict;
    uint64_t capacity;
    uint64_t next_va;
    alloc_entry *allocs;
    size_t n_allocs, cap_allocs;
    sim_counters ctr;
    uint64_t faults_injected;
    kernel_counter kernels[MAX_KERNELS];
    int n_kernels;
    fault_rule faults[MAX_FAULTS];
    int n_faults;
    char corrupt[SIM_KERNEL_NAME_LEN]; /* debug: this kernel's output is perturbed */
    uint64_t corruptions;
    uint64_t device_ns;                /* device time of every kernel and copy since reset */
} G = {.chip = "sim", .env_prefix = "SIM", .va_base = 0x00A0000000000000ull,
       .default_capacity = 1ull << 30};

static pthread_mutex_t MU = PTHREAD_MUTEX_INITIALIZER;
static __thread char tl_err[1024];

/* ------------------------------------------------------------------ env */

static const char *env_get(const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "%s_%s", G.env_prefix, suffix);
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* "64M", "1G", "4096", "2.5G" -> bytes; 0 when unparsable. */
static uint64_t parse_bytes(const char *s) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0) return 0;
    while (*end == ' ') end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1024.0; break;
        case 'M': mul = 1024.0 * 1024; break;
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        case '\0': break;
        default: return 0;
    }
    return (uint64_t)(v * mul);
}

void sim_configure(const char *chip, const char *env_prefix, uint64_t va_base,
                   uint64_t default_capacity) {
    G.chip = chip;
    G.env_prefix = env_prefix;
    G.va_base = va_base;
    G.default_capacity = default_capacity;
}

int sim_strict(void) { return G.strict; }

/* --------------------------------------------------------------- errors */

const char *sim_last_error(void) { return tl_err; }
void sim_clear_error(void) { tl_err[0] = '\0'; }

static int is_fatal_in_strict(sim_status st) {
    return st == SIM_E_INVALID_VALUE || st == SIM_E_UNSUPPORTED || st == SIM_E_BAD_ADDRESS ||
           st == SIM_E_NOT_INITIALIZED;
}

sim_status sim_fail(sim_status st, const char *fn, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(tl_err, sizeof tl_err, "%s: %s", fn, msg);
    if (G.strict && is_fatal_in_strict(st)) {
        /* A real driver takes the process down on a malformed launch. */
        fprintf(stderr, "[%s-sim strict mode] fatal: %s\n", G.chip, tl_err);
        fflush(stderr);
        abort();
    }
    return st;
}

/* ---------------------------------------------------------- life cycle */

static void free_all_locked(void) {
    for (size_t i = 0; i < G.n_allocs; i++)
        if (!G.allocs[i].mapped) free(G.allocs[i].host);
    free(G.allocs);
    G.allocs = NULL;
    G.n_allocs = G.cap_allocs = 0;
}

static sim_status parse_faults_locked(const char *spec, const char *fn);

sim_status sim_init(uint64_t capacity) {
    pthread_mutex_lock(&MU);
    if (G.initialized) {
        pthread_mutex_unlock(&MU);
        return SIM_OK; /* idempotent, like most SDK init calls */
    }
    const char *strict = env_get("STRICT");
    G.strict = strict && strcmp(strict, "0") != 0;
    const char *cap_env = env_get("CAPACITY");
    uint64_t cap = capacity ? capacity : G.default_capacity;
    if (cap_env) {
        uint64_t c = parse_bytes(cap_env);
        if (!c) {
            pthread_mutex_unlock(&MU);
            return sim_fail(SIM_E_INVALID_VALUE, "init", "%s_CAPACITY='%s' is not a size (e.g. 64M)",
                            G.env_prefix, cap_env);
        }
        cap = c; /* the environment wins, so tests can shrink any device */
    }
    G.capacity = cap;
    G.next_va = G.va_base + 0x10000;
    memset(&G.ctr, 0, sizeof G.ctr);
    G.faults_injected = 0;
    G.n_kernels = 0;
    G.n_faults = 0;
    G.device_ns = 0;
    G.corruptions = 0;
    const char *corrupt = env_get("CORRUPT");
    snprintf(G.corrupt, sizeof G.corrupt, "%s", corrupt ? corrupt : "");
    const char *faults = env_get("FAULTS");
    if (faults) {
        sim_status st = parse_faults_locked(faults, "init");
        if (st != SIM_OK) {
            pthread_mutex_unlock(&MU);
            return st;
        }
    }
    G.initialized = 1;
    pthread_mutex_unlock(&MU);
    return SIM_OK;
}

sim_status sim_shutdown(void) {
    pthread_mutex_lock(&MU);
    free_all_locked();
    G.initialized = 0;
    pthread_mutex_unlock(&MU);
    return SIM_OK;
}

int sim_is_initialized(void) { return G.initialized; }

sim_status sim_require_init(const char *fn) {
    if (!G.initialized)
        return sim_fail(SIM_E_NOT_INITIALIZED, fn, "runtime not initialized (call init first)");
    return SIM_OK;
}

/* --------------------------------------------------------------- faults */

static sim_status parse_faults_locked(const char *spec, const char *fn) {
    G.n_faults = 0;
    const char *p = spec;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        const char *colon = strchr(p, ':');
        const char *comma = strchr(p, ',');
        if (!comma) comma = p + strlen(p);
        if (!colon || colon > comma || colon == p || colon - p >= SIM_KERNEL_NAME_LEN ||
            G.n_faults == MAX_FAULTS)
            return sim_fail(SIM_E_INVALID_VALUE, fn,
                            "bad fault spec '%s' (expected 'kernel:N' or 'kernel:N+', "
                            "comma separated, at most %d)", spec, MAX_FAULTS);
        fault_rule *f = &G.faults[G.n_faults];
        memset(f, 0, sizeof *f);
        memcpy(f->name, p, (size_t)(colon - p));
        char *end = NULL;
        long long n = strtoll(colon + 1, &end, 10);
        if (end == colon + 1 || n < 1)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "bad fault spec '%s': call number must be >= 1",
                            spec);
        f->nth = (uint64_t)n;
        if (*end == '+') {
            f->and_after = 1;
            end++;
        }
        if (end != comma)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "bad fault spec '%s' near '%s'", spec, end);
        G.n_faults++;
        p = comma;
    }
    return SIM_OK;
}

sim_status sim_set_faults(const char *spec) {
    pthread_mutex_lock(&MU);
    sim_status st = parse_faults_locked(spec ? spec : "", "set_faults");
    pthread_mutex_unlock(&MU);
    return st;
}

/* Checks injected faults for one call of `name`; caller holds MU. */
static sim_status fault_check_locked(const char *name, const char *fn) {
    for (int i = 0; i < G.n_faults; i++) {
        fault_rule *f = &G.faults[i];
        if (strcmp(f->name, name) != 0) continue;
        f->seen++;
        if (f->seen == f->nth || (f->and_after && f->seen > f->nth)) {
            G.faults_injected++;
            return sim_fail(SIM_E_DEVICE, fn, "device fault (injected by %s_FAULTS: call %llu of %s)",
                            G.env_prefix, (unsigned long long)f->seen, name);
        }
    }
    return SIM_OK;
}

/* ---------------------------------------------------------- device timer */

/* A device operation's time runs from its launch (after the arguments were
 * validated) to the end of the runtime call that launched it: sim_op_done(),
 * which each runtime's status conversion calls on the way out.  Per thread,
 * like a stream; a call that launches several kernels is timed from the first. */
static __thread uint64_t tl_t0, tl_last_ns;
static __thread int tl_open, tl_corrupt_pending;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void timer_start(void) {
    if (!tl_open) {
        tl_open = 1;
        tl_t0 = now_ns();
    }
}

void sim_op_done(void) {
    tl_corrupt_pending = 0;
    if (!tl_open) return;
    tl_open = 0;
    tl_last_ns = now_ns() - tl_t0;
    __atomic_add_fetch(&G.device_ns, tl_last_ns, __ATOMIC_RELAXED);
}

uint64_t sim_last_op_ns(void) {
    sim_op_done();
    return tl_last_ns;
}

uint64_t sim_device_ns_total(void) { return __atomic_load_n(&G.device_ns, __ATOMIC_RELAXED); }

/* ------------------------------------------------------ debug: corruption */

sim_status sim_set_corrupt(const char *kernel) {
    if (kernel && strlen(kernel) >= SIM_KERNEL_NAME_LEN)
        return sim_fail(SIM_E_INVALID_VALUE, "set_corrupt", "kernel name '%s' is longer than %d characters",
                        kernel, SIM_KERNEL_NAME_LEN - 1);
    pthread_mutex_lock(&MU);
    snprintf(G.corrupt, sizeof G.corrupt, "%s", kernel ? kernel : "");
    pthread_mutex_unlock(&MU);
    return SIM_OK;
}

void sim_corrupt_output(const sim_view *v) {
    if (!tl_corrupt_pending || !v || !v->present || sim_numel(v) == 0) return;
    tl_corrupt_pending = 0; /* the first output written, once per launch */
    sim_store(v->base, v->dtype, sim_load(v->base, v->dtype) + 1.0);
    __atomic_add_fetch(&G.corruptions, 1, __ATOMIC_RELAXED);
}

uint64_t sim_corruptions(void) { return __atomic_load_n(&G.corruptions, __ATOMIC_RELAXED); }

sim_status sim_launch(const char *kernel, const char *fn) {
    pthread_mutex_lock(&MU);
    sim_status st = fault_check_locked(kernel, fn);
    if (st == SIM_OK) {
        timer_start();
        if (G.corrupt[0] && strcmp(G.corrupt, kernel) == 0) tl_corrupt_pending = 1;
        G.ctr.kernel_launches++;
        int i;
        for (i = 0; i < G.n_kernels; i++)
            if (strcmp(G.kernels[i].name, kernel) == 0) break;
        if (i == G.n_kernels && G.n_kernels < MAX_KERNELS) {
            snprintf(G.kernels[i].name, SIM_KERNEL_NAME_LEN, "%s", kernel);
            G.kernels[i].count = 0;
            G.n_kernels++;
        }
        if (i < G.n_kernels) G.kernels[i].count++;
    }
    pthread_mutex_unlock(&MU);
    return st;
}

/* ------------------------------------------------------------- counters */

void sim_get_counters(sim_counters *out) {
    pthread_mutex_lock(&MU);
    *out = G.ctr;
    pthread_mutex_unlock(&MU);
}

void sim_reset_counters(void) {
    pthread_mutex_lock(&MU);
    uint64_t live = G.ctr.live_bytes, live_mapped = G.ctr.live_mapped_bytes;
    memset(&G.ctr, 0, sizeof G.ctr);
    G.ctr.live_bytes = live;  /* what is allocated stays allocated */
    G.ctr.peak_bytes = live;
    G.ctr.live_mapped_bytes = live_mapped;
    for (int i = 0; i < G.n_kernels; i++) G.kernels[i].count = 0;
    G.device_ns = 0;
    pthread_mutex_unlock(&MU);
}

int sim_kernel_counters(char (*names)[SIM_KERNEL_NAME_LEN], uint64_t *counts, int max) {
    pthread_mutex_lock(&MU);
    int n = 0;
    for (int i = 0; i < G.n_kernels; i++) {
        if (!G.kernels[i].count) continue;
        if (n < max) {
            if (names) memcpy(names[n], G.kernels[i].name, SIM_KERNEL_NAME_LEN);
            if (counts) counts[n] = G.kernels[i].count;
        }
        n++;
    }
    pthread_mutex_unlock(&MU);
    return n;
}

uint64_t sim_kernel_count(const char *name) {
    uint64_t c = 0;
    pthread_mutex_lock(&MU);
    for (int i = 0; i < G.n_kernels; i++)
        if (strcmp(G.kernels[i].name, name) == 0) c = G.kernels[i].count;
    pthread_mutex_unlock(&MU);
    return c;
}

/* --------------------------------------------------------------- memory */

/* Index of the entry whose range holds addr, or -1.  Caller holds MU. */
static long find_locked(uint64_t addr) {
    size_t lo = 0, hi = G.n_allocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (G.allocs[mid].va <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    alloc_entry *e = &G.allocs[lo - 1];
    if (addr < e->va + (e->size ? e->size : 1)) return (long)(lo - 1);
    return -1;
}

static sim_status insert_locked(uint64_t size, uint64_t charged, char *host, int mapped,
                                uint64_t *out, const char *fn) {
    if (G.n_allocs == G.cap_allocs) {
        size_t nc = G.cap_allocs ? G.cap_allocs * 2 : 256;
        alloc_entry *na = realloc(G.allocs, nc * sizeof *na);
        if (!na) return sim_fail(SIM_E_OOM, fn, "out of host memory for the allocation table");
        G.allocs = na;
        G.cap_allocs = nc;
    }
    uint64_t va = G.next_va;
    uint64_t span = (size + GUARD - 1) / GUARD * GUARD + GUARD;
    G.next_va += span;
    /* next_va only grows, so appending keeps the table sorted */
    G.allocs[G.n_allocs++] = (alloc_entry){va, size, charged, host, mapped};
    *out = va;
    return SIM_OK;
}

sim_status sim_malloc(uint64_t *out, uint64_t nbytes, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    if (!out) return sim_fail(SIM_E_INVALID_VALUE, fn, "output pointer is NULL");
    if (nbytes == 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "cannot allocate 0 bytes");
    uint64_t charged = (nbytes + GRANULE - 1) / GRANULE * GRANULE;
    pthread_mutex_lock(&MU);
    st = fault_check_locked("malloc", fn);
    if (st) {
        pthread_mutex_unlock(&MU);
        return st;
    }
    if (G.ctr.live_bytes + charged > G.capacity) {
        uint64_t live = G.ctr.live_bytes;
        pthread_mutex_unlock(&MU);
        return sim_fail(SIM_E_OOM, fn,
                        "out of device memory: requested %llu bytes, %llu of %llu in use "
                        "(%llu free)", (unsigned long long)nbytes, (unsigned long long)live,
                        (unsigned long long)G.capacity, (unsigned long long)(G.capacity - live));
    }
    size_t hsz = (size_t)((nbytes + 63) / 64 * 64);
    char *host = aligned_alloc(64, hsz);
    if (!host) {
        pthread_mutex_unlock(&MU);
        return sim_fail(SIM_E_OOM, fn, "out of device memory: backing store of %llu bytes failed",
                        (unsigned long long)nbytes);
    }
    /* Fresh device memory is garbage; all-ones bytes read as NaN / -1, so a
     * read of never-written memory shows up in results instead of hiding as 0. */
    memset(host, 0xFF, hsz);
    st = insert_locked(nbytes, charged, host, 0, out, fn);
    if (st) {
        free(host);
        pthread_mutex_unlock(&MU);
        return st;
    }
    G.ctr.alloc_calls++;
    G.ctr.live_bytes += charged;
    if (G.ctr.live_bytes > G.ctr.peak_bytes) G.ctr.peak_bytes = G.ctr.live_bytes;
    pthread_mutex_unlock(&MU);
    return SIM_OK;
}

static sim_status release_locked(uint64_t addr, int want_mapped, const char *fn) {
    long i = find_locked(addr);
    if (i < 0 || G.allocs[i].va != addr)
        return sim_fail(SIM_E_BAD_ADDRESS, fn, "0x%llx is not the start of a live %s",
                        (unsigned long long)addr, want_mapped ? "mapping" : "allocation");
    alloc_entry e = G.allocs[i];
    if (e.mapped != want_mapped)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "0x%llx is %s; use %s", (unsigned long long)addr,
                        e.mapped ? "a host mapping" : "a device allocation",
                        e.mapped ? "the unmap call" : "the free call");
    memmove(&G.allocs[i], &G.allocs[i + 1], (G.n_allocs - (size_t)i - 1) * sizeof(alloc_entry));
    G.n_allocs--;
    if (e.mapped) {
        G.ctr.unmap_calls++;
        G.ctr.live_mapped_bytes -= e.size;
    } else {
        free(e.host);
        G.ctr.free_calls++;
        G.ctr.live_bytes -= e.charged;
    }
    return SIM_OK;
}

sim_status sim_free(uint64_t addr, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    pthread_mutex_lock(&MU);
    st = release_locked(addr, 0, fn);
    pthread_mutex_unlock(&MU);
    return st;
}

sim_status sim_map(const void *host, uint64_t nbytes, uint64_t *out, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    if (!host || !out) return sim_fail(SIM_E_INVALID_VALUE, fn, "host pointer or output is NULL");
    if (nbytes == 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "cannot map 0 bytes");
    if ((uintptr_t)host % 64)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "host pointer %p is not 64-byte aligned", host);
    pthread_mutex_lock(&MU);
    st = fault_check_locked("mem_map", fn);
    if (!st) st = insert_locked(nbytes, 0, (char *)host, 1, out, fn);
    if (!st) {
        timer_start();
        G.ctr.map_calls++;
        G.ctr.mapped_bytes += nbytes;
        G.ctr.live_mapped_bytes += nbytes;
    }
    pthread_mutex_unlock(&MU);
    return st;
}

sim_status sim_unmap(uint64_t addr, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    pthread_mutex_lock(&MU);
    st = release_locked(addr, 1, fn);
    pthread_mutex_unlock(&MU);
    return st;
}

static sim_status resolve_locked(uint64_t addr, uint64_t nbytes, char **host, const char *fn,
                                 const char *what) {
    long i = find_locked(addr);
    if (i < 0)
        return sim_fail(SIM_E_BAD_ADDRESS, fn, "%s: device address 0x%llx is not in any live allocation",
                        what, (unsigned long long)addr);
    alloc_entry *e = &G.allocs[i];
    if (addr + nbytes > e->va + e->size)
        return sim_fail(SIM_E_BAD_ADDRESS, fn,
                        "%s: %llu bytes at 0x%llx run past the end of a %llu-byte allocation "
                        "at 0x%llx", what, (unsigned long long)nbytes, (unsigned long long)addr,
                        (unsigned long long)e->size, (unsigned long long)e->va);
    *host = e->host + (addr - e->va);
    return SIM_OK;
}

sim_status sim_resolve(uint64_t addr, uint64_t nbytes, char **host, const char *fn,
                       const char *what) {
    pthread_mutex_lock(&MU);
    sim_status st = resolve_locked(addr, nbytes, host, fn, what);
    pthread_mutex_unlock(&MU);
    return st;
}

sim_status sim_h2d(uint64_t dst, const void *src, uint64_t n, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    if (!src && n) return sim_fail(SIM_E_INVALID_VALUE, fn, "source host pointer is NULL");
    char *d;
    pthread_mutex_lock(&MU);
    st = fault_check_locked("memcpy_h2d", fn);
    if (!st) st = resolve_locked(dst, n, &d, fn, "destination");
    if (!st) {
        timer_start();
        memcpy(d, src, n);
        G.ctr.h2d_calls++;
        G.ctr.h2d_bytes += n;
    }
    pthread_mutex_unlock(&MU);
    return st;
}

sim_status sim_d2h(void *dst, uint64_t src, uint64_t n, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    if (!dst && n) return sim_fail(SIM_E_INVALID_VALUE, fn, "destination host pointer is NULL");
    char *s;
    pthread_mutex_lock(&MU);
    st = fault_check_locked("memcpy_d2h", fn);
    if (!st) st = resolve_locked(src, n, &s, fn, "source");
    if (!st) {
        timer_start();
        memcpy(dst, s, n);
        G.ctr.d2h_calls++;
        G.ctr.d2h_bytes += n;
    }
    pthread_mutex_unlock(&MU);
    return st;
}

sim_status sim_d2d(uint64_t dst, uint64_t src, uint64_t n, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    char *s, *d;
    pthread_mutex_lock(&MU);
    st = fault_check_locked("memcpy_d2d", fn);
    if (!st) st = resolve_locked(src, n, &s, fn, "source");
    if (!st) st = resolve_locked(dst, n, &d, fn, "destination");
    if (!st) {
        timer_start();
        memmove(d, s, n);
        G.ctr.d2d_calls++;
        G.ctr.d2d_bytes += n;
    }
    pthread_mutex_unlock(&MU);
    return st;
}

sim_status sim_h2d_batch(const uint64_t *dst, const void *const *src, const size_t *n,
                         size_t count, const char *fn) {
    sim_status st = sim_require_init(fn);
    if (st) return st;
    if (count && (!dst || !src || !n))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "NULL array with count=%zu", count);
    pthread_mutex_lock(&MU);
    st = fault_check_locked("memcpy_h2d_batch", fn);
    /* Validate every entry before moving any byte: a bad batch changes nothing. */
    for (size_t i = 0; !st && i < count; i++) {
        char *d;
        char what[48];
        snprintf(what, sizeof what, "entry %zu destination", i);
        if (!src[i] && n[i]) st = sim_fail(SIM_E_INVALID_VALUE, fn, "entry %zu: source is NULL", i);
        else st = resolve_locked(dst[i], n[i], &d, fn, what);
    }
    if (!st) {
        timer_start();
        uint64_t total = 0;
        for (size_t i = 0; i < count; i++) {
            char *d = NULL;
            resolve_locked(dst[i], n[i], &d, fn, "destination");
            memcpy(d, src[i], n[i]);
            total += n[i];
        }
        G.ctr.h2d_calls++;
        G.ctr.h2d_batch_calls++;
        G.ctr.h2d_bytes += total;
    }
    pthread_mutex_unlock(&MU);
    return st;
}

void sim_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    pthread_mutex_lock(&MU);
    if (free_bytes) *free_bytes = G.capacity - G.ctr.live_bytes;
    if (total_bytes) *total_bytes = G.capacity;
    pthread_mutex_unlock(&MU);
}

/* ---------------------------------------------------------------- views */

size_t sim_dtype_size(sim_dtype dt) {
    static const size_t sz[SIM_DTYPE_COUNT] = {4, 2, 2, 1, 1, 4, 8, 1, 8};
    return (unsigned)dt < SIM_DTYPE_COUNT ? sz[dt] : 0;
}

const char *sim_dtype_name(sim_dtype dt) {
    static const char *nm[SIM_DTYPE_COUNT] = {"float32", "float16", "bfloat16", "int8", "uint8",
                                              "int32", "int64", "bool", "float64"};
    return (unsigned)dt < SIM_DTYPE_COUNT ? nm[dt] : "?";
}

int64_t sim_numel(const sim_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

int sim_is_contiguous(const sim_view *v) {
    int64_t expect = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] != 1 && v->strides[i] != expect) return 0;
        expect *= v->shape[i];
    }
    return 1;
}

int sim_same_shape(const sim_view *a, const sim_view *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

void sim_shape_str(const sim_view *v, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < v->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)v->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

sim_status sim_make_view(sim_view *v, uint64_t addr, int ndim, const int64_t *shape,
                         const int64_t *strides, sim_dtype dt, const char *fn, const char *what) {
    memset(v, 0, sizeof *v);
    if ((unsigned)dt >= SIM_DTYPE_COUNT)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: unknown dtype code %d", what, (int)dt);
    if (ndim < 0 || ndim > SIM_MAX_DIMS)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: ndim=%d out of range", what, ndim);
    v->ndim = ndim;
    v->dtype = dt;
    v->present = 1;
    int64_t max_off = 0, numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: negative size %lld in dim %d", what,
                            (long long)shape[i], i);
        if (strides[i] < 0)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: negative stride in dim %d", what, i);
        v->shape[i] = shape[i];
        v->strides[i] = strides[i];
        numel *= shape[i];
        if (shape[i] > 0) max_off += (shape[i] - 1) * strides[i];
    }
    if (numel == 0) return SIM_OK; /* nothing is ever touched */
    uint64_t extent = (uint64_t)(max_off + 1) * sim_dtype_size(dt);
    return sim_resolve(addr, extent, &v->base, fn, what);
}

/* ----------------------------------------------------------- conversion */

/* The arithmetic lives in simcore.h (inline, so kernels' loops vectorize). */
float sim_h2f(uint16_t h) { return sim_h2f_inline(h); }
uint16_t sim_f2h(float x) { return sim_f2h_inline(x); }
float sim_bf2f(uint16_t b) { return sim_bf2f_inline(b); }
uint16_t sim_f2bf(float x) { return sim_f2bf_inline(x); }

double sim_load(const char *p, sim_dtype dt) {
    switch (dt) {
        case SIM_F32: { float v; memcpy(&v, p, 4); return v; }
        case SIM_F64: { double v; memcpy(&v, p, 8); return v; }
        case SIM_F16: { uint16_t v; memcpy(&v, p, 2); return sim_h2f(v); }
        case SIM_BF16: { uint16_t v; memcpy(&v, p, 2); return sim_bf2f(v); }
        case SIM_I8: return (double)*(const int8_t *)p;
        case SIM_U8: return (double)*(const uint8_t *)p;
        case SIM_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
        case SIM_I32: { int32_t v; memcpy(&v, p, 4); return v; }
        case SIM_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
        default: return 0;
    }
}

void sim_store(char *p, sim_dtype dt, double v) {
    switch (dt) {
        case SIM_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
        case SIM_F64: memcpy(p, &v, 8); break;
        case SIM_F16: { uint16_t h = sim_f2h((float)v); memcpy(p, &h, 2); break; }
        case SIM_BF16: { uint16_t h = sim_f2bf((float)v); memcpy(p, &h, 2); break; }
        case SIM_I8: *(int8_t *)p = (int8_t)(int64_t)v; break;
        case SIM_U8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
        case SIM_BOOL: *(uint8_t *)p = v != 0; break;
        case SIM_I32: { int32_t i = (int32_t)(int64_t)v; memcpy(p, &i, 4); break; }
        case SIM_I64: { int64_t i = (int64_t)v; memcpy(p, &i, 8); break; }
        default: break;
    }
}

/* ----------------------------------------------------------- iteration */

int sim_iter_init(sim_iter *it, int ndim, const int64_t *shape, int nop, char *const *base,
                  const int64_t *const *strides, const int64_t *es) {
    it->nop = nop;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) return 0;
    /* innermost first: drop size-1 dims, merge a dim into the one inside it
     * when every operand steps over it by exactly that dim's extent */
    int64_t sh[SIM_MAX_DIMS], st[SIM_ITER_MAX_OPS][SIM_MAX_DIMS];
    int nd = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1) continue;
        int merge = nd > 0;
        for (int k = 0; merge && k < nop; k++)
            merge = strides[k][d] == st[k][nd - 1] * sh[nd - 1];
        if (merge) {
            sh[nd - 1] *= shape[d];
            continue;
        }
        sh[nd] = shape[d];
        for (int k = 0; k < nop; k++) st[k][nd] = strides[k][d];
        nd++;
    }
    if (nd == 0) { /* one element */
        sh[0] = 1;
        for (int k = 0; k < nop; k++) st[k][0] = 0;
        nd = 1;
    }
    it->nd = nd;
    for (int d = 0; d < nd; d++) {
        it->shape[d] = sh[nd - 1 - d];
        it->idx[d] = 0;
        for (int k = 0; k < nop; k++) it->bstride[k][d] = st[k][nd - 1 - d] * es[k];
    }
    it->n = it->shape[nd - 1];
    for (int k = 0; k < nop; k++) {
        it->p[k] = base[k];
        it->s[k] = st[k][0];
    }
    return 1;
}

int sim_iter_views(sim_iter *it, int nop, const sim_view *const *v) {
    char *base[SIM_ITER_MAX_OPS];
    const int64_t *strides[SIM_ITER_MAX_OPS];
    int64_t es[SIM_ITER_MAX_OPS];
    for (int k = 0; k < nop; k++) {
        base[k] = v[k]->base;
        strides[k] = v[k]->strides;
        es[k] = (int64_t)sim_dtype_size(v[k]->dtype);
    }
    return sim_iter_init(it, v[0]->ndim, v[0]->shape, nop, base, strides, es);
}
