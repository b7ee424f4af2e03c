/*
 * sim_ccl.c: collectives between processes through a shared mapping.
 *
 * Layout of the mapping /dev/shm/flsim-ccl-<chip>-<key>:
 *   [header, 4 KiB][set 0: slot of rank 0, slot of rank 1, ...][set 1: ...]
 * A collective is cut into chunks of one slot.  Per chunk: every rank that
 * contributes copies its chunk from device memory into its slot, all meet at
 * a barrier, and every rank reads the slots it needs into its device memory.
 * Consecutive chunks use the two slot sets in turn, so one meeting per chunk
 * is enough (see run()).
 * Reductions run in rank order on every rank, so all ranks get bit-identical
 * results.
 *
 * The barrier is a generation counter in the header (C11 atomics on a
 * MAP_SHARED page work across processes).  A waiter spins briefly, then
 * sleeps in short steps, checking the deadline, the abort flag and whether
 * each peer's process still exists.
 */
#define _GNU_SOURCE
#include "sim_ccl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define HEADER_BYTES 4096u
#define DEFAULT_SLOT_BYTES (4u << 20)
#define MIN_SLOT_BYTES 64u
#define COMM_MAGIC 0x43434c31u /* "CCL1" */
#define CHECK_MS 20.0          /* how often a waiter checks its peers and the deadline */

/* What a rank is calling: compared across ranks at the first barrier of
 * every collective, so mismatched calls fail instead of mixing data. */
typedef struct {
    uint32_t kind, dtype, op;
    int32_t root;
    uint64_t count;
} coll_desc;

typedef struct {
    _Atomic uint32_t nranks;      /* set by the first rank to arrive; others must agree */
    _Atomic uint32_t slot_bytes;
    _Atomic uint32_t arrived;     /* ranks waiting at the current barrier */
    _Atomic uint32_t generation;  /* bumped when a barrier opens */
    _Atomic int32_t failed_rank;  /* -1, or the rank that reported a failure (+1 stored) */
    _Atomic int32_t pids[SIM_CCL_MAX_RANKS];
    char failure[512];            /* why failed_rank failed (written before failed_rank) */
    coll_desc desc[2][SIM_CCL_MAX_RANKS]; /* what each rank is calling, per slot set */
} shm_header;

_Static_assert(sizeof(shm_header) <= HEADER_BYTES, "header must fit its page");

struct sim_ccl_comm {
    uint32_t magic;
    int rank, nranks;
    int timeout_ms;
    int broken;                   /* a collective failed: the communicator is unusable */
    size_t slot_bytes;
    size_t map_bytes;
    shm_header *h;
    char *slots;
    int parity;                   /* the slot set the next chunk uses (the same on every rank) */
    float *scratch;               /* one slot of 16-bit values as floats, for reductions */
    char name[128];
    char chip[32];
};

static const char *const STATUS_NAMES[SIM_CCL_E_COUNT] = {
    "SIM_CCL_OK", "SIM_CCL_E_INVALID", "SIM_CCL_E_UNSUPPORTED", "SIM_CCL_E_TIMEOUT",
    "SIM_CCL_E_PEER", "SIM_CCL_E_SYSTEM", "SIM_CCL_E_DEVICE"};

const char *sim_ccl_status_name(sim_ccl_status st) {
    return (unsigned)st < SIM_CCL_E_COUNT ? STATUS_NAMES[st] : "SIM_CCL_E_UNKNOWN";
}

/* sim_fail records the message (and aborts in strict mode for invalid
 * calls); the CCL status is returned separately. */
static sim_ccl_status fail_invalid(const char *fn, const char *msg) {
    sim_fail(SIM_E_INVALID_VALUE, fn, "%s", msg);
    return SIM_CCL_E_INVALID;
}

static sim_ccl_status from_sim(sim_status st) {
    switch (st) {
        case SIM_OK: return SIM_CCL_OK;
        case SIM_E_DEVICE: return SIM_CCL_E_DEVICE;
        case SIM_E_UNSUPPORTED: return SIM_CCL_E_UNSUPPORTED;
        default: return SIM_CCL_E_INVALID;
    }
}

int sim_ccl_valid(const sim_ccl_comm *c) { return c && c->magic == COMM_MAGIC; }
int sim_ccl_rank(const sim_ccl_comm *c) { return c->rank; }
int sim_ccl_nranks(const sim_ccl_comm *c) { return c->nranks; }

/* ------------------------------------------------------------- liveness */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A process that exited but was not reaped yet still answers kill(pid, 0):
 * /proc says it is a zombie. */
static int process_alive(pid_t pid) {
    if (pid <= 0) return 1;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;  /* no /proc: trust kill() */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    if (paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X')) return 0;
    return 1;
}

/* Sleeps until *addr may no longer hold `old` (woken by wake_all) or `ms`
 * pass.  A futex on the shared page wakes a waiter as soon as the last rank
 * arrives, where sleeping in steps would add up to a step per barrier. */
static void wait_change(_Atomic uint32_t *addr, uint32_t old, double ms) {
    long long ns = ms > 0 ? (long long)(ms * 1e6) : 0;
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, old, &ts, NULL, 0);
#else
    (void)addr;
    (void)old;
    if (ts.tv_sec || ts.tv_nsec > 100000) ts = (struct timespec){0, 100000};
    nanosleep(&ts, NULL);
#endif
}

static void wake_all(_Atomic uint32_t *addr) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

/* Marks the communicator failed for every rank, with the reason. */
static void publish_failure(sim_ccl_comm *c, const char *why) {
    int32_t none = 0;
    char buf[sizeof c->h->failure];
    snprintf(buf, sizeof buf, "%.500s", why);
    /* only the first failure is kept: its message is written before the flag */
    if (atomic_load(&c->h->failed_rank) == 0) {
        memcpy(c->h->failure, buf, sizeof buf);
        atomic_compare_exchange_strong(&c->h->failed_rank, &none, c->rank + 1);
        wake_all(&c->h->generation);  /* waiters look at failed_rank when they wake */
    }
    c->broken = 1;
}

/* Whether waiting can still succeed: a peer that reported a failure, or
 * whose process is gone, never arrives.  Writes the reason into `why`. */
static sim_ccl_status peer_problem(sim_ccl_comm *c, char *why, size_t n) {
    int32_t fr = atomic_load(&c->h->failed_rank);
    if (fr != 0 && fr - 1 != c->rank) {
        char msg[sizeof c->h->failure];
        memcpy(msg, c->h->failure, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        snprintf(why, n, "rank %d failed: %s", fr - 1, msg);
        return SIM_CCL_E_PEER;
    }
    for (int r = 0; r < c->nranks; r++) {
        pid_t pid = (pid_t)atomic_load(&c->h->pids[r]);
        if (r != c->rank && pid > 0 && !process_alive(pid)) {
            snprintf(why, n, "rank %d (pid %d) exited", r, (int)pid);
            return SIM_CCL_E_PEER;
        }
    }
    return SIM_CCL_OK;
}

static sim_ccl_status barrier(sim_ccl_comm *c, const char *fn, const char *what) {
    shm_header *h = c->h;
    uint32_t gen = atomic_load_explicit(&h->generation, memory_order_acquire);
    if (atomic_fetch_add(&h->arrived, 1) + 1 == (uint32_t)c->nranks) {
        /* A rank that gave up (timed out, failed) still counts as arrived:
         * do not open the barrier on its stale slot. */
        char why[600];
        if (atomic_load(&h->failed_rank) != 0 && peer_problem(c, why, sizeof why)) {
            c->broken = 1;
            sim_fail(SIM_E_DEVICE, fn, "%s on communicator '%s' (rank %d of %d) cannot complete: %s",
                     what, c->name, c->rank, c->nranks, why);
            return SIM_CCL_E_PEER;
        }
        atomic_store_explicit(&h->arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->generation, 1, memory_order_release);
        wake_all(&h->generation);
        return SIM_CCL_OK;
    }
    double deadline = now_ms() + c->timeout_ms, next_check = 0;
    unsigned spins = 0;
    char why[600];
    while (atomic_load_explicit(&h->generation, memory_order_acquire) == gen) {
        if (++spins < 2000) continue;  /* a few microseconds: a peer about to arrive */
        double t = now_ms();
        sim_ccl_status st = SIM_CCL_OK;
        if (t >= next_check) {
            st = peer_problem(c, why, sizeof why);
            next_check = t + CHECK_MS;
        }
        /* the last peer may have opened the barrier just before it exited */
        if (atomic_load_explicit(&h->generation, memory_order_acquire) != gen) break;
        if (st) {
            c->broken = 1;
            sim_fail(SIM_E_DEVICE, fn, "%s on communicator '%s' (rank %d of %d) cannot complete: %s",
                     what, c->name, c->rank, c->nranks, why);
            return st;
        }
        if (t >= deadline) {
            snprintf(why, sizeof why, "rank %d timed out after %d ms in %s", c->rank, c->timeout_ms, what);
            publish_failure(c, why);
            sim_fail(SIM_E_DEVICE, fn, "%s on communicator '%s' (rank %d of %d) timed out after %d ms "
                     "with %u of %d ranks arrived: a peer is not calling the same collective",
                     what, c->name, c->rank, c->nranks, c->timeout_ms,
                     atomic_load(&h->arrived), c->nranks);
            return SIM_CCL_E_TIMEOUT;
        }
        double left = deadline - t;
        wait_change(&h->generation, gen, left < CHECK_MS ? left : CHECK_MS);
    }
    return SIM_CCL_OK;
}

/* ----------------------------------------------------------- life cycle */

static int key_ok(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || n > SIM_CCL_MAX_KEY) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = key[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_'))
            return 0;
    }
    return 1;
}

static size_t slot_bytes_from_env(const char *prefix) {
    char name[96];
    snprintf(name, sizeof name, "%s_CCL_SLOT_BYTES", prefix);
    const char *v = getenv(name);
    if (!v || !*v) return DEFAULT_SLOT_BYTES;
    char *end = NULL;
    unsigned long long n = strtoull(v, &end, 10);
    if (end == v || *end || n < MIN_SLOT_BYTES || n > (1ull << 30)) return 0;
    return (size_t)(n / 64 * 64);
}

sim_ccl_status sim_ccl_init(sim_ccl_comm **out, const char *chip, const char *env_prefix,
                            const char *key, int nranks, int rank, int timeout_ms, const char *fn) {
    if (sim_require_init(fn) != SIM_OK) return SIM_CCL_E_INVALID;
    if (!out) return fail_invalid(fn, "communicator output pointer is NULL");
    *out = NULL;
    if (!key || !key_ok(key))
        return fail_invalid(fn, "rendezvous key must be 1-64 characters of [A-Za-z0-9_-]");
    if (nranks < 1 || nranks > SIM_CCL_MAX_RANKS) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "nranks=%d (1..%d)", nranks, SIM_CCL_MAX_RANKS);
        return SIM_CCL_E_INVALID;
    }
    if (rank < 0 || rank >= nranks) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "rank=%d is not in 0..%d", rank, nranks - 1);
        return SIM_CCL_E_INVALID;
    }
    if (timeout_ms <= 0) return fail_invalid(fn, "timeout must be a positive number of milliseconds");
    size_t slot = slot_bytes_from_env(env_prefix);
    if (!slot) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "%s_CCL_SLOT_BYTES must be a byte count from %u to 1 GiB",
                 env_prefix, MIN_SLOT_BYTES);
        return SIM_CCL_E_INVALID;
    }

    sim_ccl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        sim_fail(SIM_E_OOM, fn, "out of host memory");
        return SIM_CCL_E_SYSTEM;
    }
    c->rank = rank;
    c->nranks = nranks;
    c->timeout_ms = timeout_ms;
    c->slot_bytes = slot;
    c->map_bytes = HEADER_BYTES + 2 * (size_t)nranks * slot;
    snprintf(c->chip, sizeof c->chip, "%s", chip);
    snprintf(c->name, sizeof c->name, "flsim-ccl-%s-%s", chip, key);
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/%s", c->name);

    /* Every rank creates-or-opens and sizes the file: whoever comes first,
     * the others find it the right size (ftruncate to the same size is a
     * no-op), and fresh pages read as zero, which is the header's start state. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        sim_fail(SIM_E_DEVICE, fn, "cannot open %s: %s", path, strerror(errno));
        free(c);
        return SIM_CCL_E_SYSTEM;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) sb.st_size = 0;
    /* a file larger than ours means another nranks or slot size: found below */
    if ((size_t)sb.st_size < c->map_bytes && ftruncate(fd, (off_t)c->map_bytes) != 0) {
        sim_fail(SIM_E_DEVICE, fn, "cannot size %s to %zu bytes: %s", path, c->map_bytes,
                 strerror(errno));
        close(fd);
        free(c);
        return SIM_CCL_E_SYSTEM;
    }
    void *m = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        sim_fail(SIM_E_DEVICE, fn, "cannot map %s: %s", path, strerror(errno));
        free(c);
        return SIM_CCL_E_SYSTEM;
    }
    c->h = (shm_header *)m;
    c->slots = (char *)m + HEADER_BYTES;
    c->magic = COMM_MAGIC;

    sim_ccl_status st = SIM_CCL_OK;
    uint32_t expect = 0;
    if (!atomic_compare_exchange_strong(&c->h->nranks, &expect, (uint32_t)nranks) &&
        expect != (uint32_t)nranks) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "communicator '%s' was created with %u ranks; this rank "
                 "says %d", c->name, expect, nranks);
        st = SIM_CCL_E_INVALID;
    }
    expect = 0;
    if (!st && !atomic_compare_exchange_strong(&c->h->slot_bytes, &expect, (uint32_t)slot) &&
        expect != (uint32_t)slot) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "communicator '%s' uses %u-byte slots; this rank was "
                 "given %zu (set %s_CCL_SLOT_BYTES alike on every rank)", c->name, expect, slot,
                 env_prefix);
        st = SIM_CCL_E_INVALID;
    }
    int32_t none = 0;
    if (!st && !atomic_compare_exchange_strong(&c->h->pids[rank], &none, (int32_t)getpid())) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "rank %d of communicator '%s' was already taken by pid %d",
                 rank, c->name, (int)none);
        st = SIM_CCL_E_INVALID;
    }
    if (!st) st = barrier(c, fn, "communicator init");
    /* everyone who will ever use the mapping has it now: drop the name so
     * nothing is left in /dev/shm, whatever happens to the processes */
    unlink(path);
    if (st) {
        munmap(m, c->map_bytes);
        c->magic = 0;
        free(c);
        return st;
    }
    *out = c;
    return SIM_CCL_OK;
}

sim_ccl_status sim_ccl_destroy(sim_ccl_comm *c, const char *fn) {
    if (!sim_ccl_valid(c)) return fail_invalid(fn, "not a live communicator");
    munmap(c->h, c->map_bytes);
    free(c->scratch);
    c->magic = 0;
    free(c);
    return SIM_CCL_OK;
}

/* ------------------------------------------------------------ reduction */

/* acc[i] = acc[i] OP v[i], with the op hoisted out of the loop so the
 * compiler vectorizes it; max/min propagate NaN like PyTorch's. */
#define COMBINE(acc, V, n, op)                                                   \
    do {                                                                         \
        switch (op) {                                                            \
            case SIM_CCL_SUM: for (size_t i = 0; i < (n); i++) (acc)[i] += V; break;  \
            case SIM_CCL_PROD: for (size_t i = 0; i < (n); i++) (acc)[i] *= V; break; \
            case SIM_CCL_MAX:                                                    \
                for (size_t i = 0; i < (n); i++) {                               \
                    float v_ = V;                                                \
                    (acc)[i] = (v_ > (acc)[i] || v_ != v_) ? v_ : (acc)[i];      \
                }                                                                \
                break;                                                           \
            case SIM_CCL_MIN:                                                    \
                for (size_t i = 0; i < (n); i++) {                               \
                    float v_ = V;                                                \
                    (acc)[i] = (v_ < (acc)[i] || v_ != v_) ? v_ : (acc)[i];      \
                }                                                                \
                break;                                                           \
            default: break;                                                      \
        }                                                                        \
    } while (0)

static float half_to_float(uint16_t h, sim_dtype dt) { return dt == SIM_F16 ? sim_h2f(h) : sim_bf2f(h); }

/* Reduces the ranks' slots, in rank order, into dst.  16-bit floats
 * accumulate in float (`scratch`, count floats) and round once, as
 * PyTorch's CPU sum does; every rank computes the same bits. */
static void reduce_into(char *dst, const char *const *srcs, int n, size_t count, sim_dtype dt,
                        sim_ccl_op op, float *scratch) {
    if (dt == SIM_F32) {
        float *acc = (float *)dst;
        memcpy(acc, srcs[0], count * 4);
        for (int r = 1; r < n; r++) {
            const float *v = (const float *)srcs[r];
            COMBINE(acc, v[i], count, op);
        }
        return;
    }
    if (dt == SIM_F16 || dt == SIM_BF16) {
        const uint16_t *s0 = (const uint16_t *)srcs[0];
        for (size_t i = 0; i < count; i++) scratch[i] = half_to_float(s0[i], dt);
        for (int r = 1; r < n; r++) {
            const uint16_t *v = (const uint16_t *)srcs[r];
            COMBINE(scratch, half_to_float(v[i], dt), count, op);
        }
        uint16_t *d = (uint16_t *)dst;
        for (size_t i = 0; i < count; i++) d[i] = dt == SIM_F16 ? sim_f2h(scratch[i]) : sim_f2bf(scratch[i]);
        return;
    }
    size_t es = sim_dtype_size(dt);  /* other dtypes: exact in double for the sizes used */
    for (size_t i = 0; i < count; i++) {
        double acc = sim_load(srcs[0] + i * es, dt);
        for (int r = 1; r < n; r++) {
            double v = sim_load(srcs[r] + i * es, dt);
            switch (op) {
                case SIM_CCL_SUM: acc += v; break;
                case SIM_CCL_PROD: acc *= v; break;
                case SIM_CCL_MAX: acc = (v > acc || v != v) ? v : acc; break;
                case SIM_CCL_MIN: acc = (v < acc || v != v) ? v : acc; break;
                default: break;
            }
        }
        sim_store(dst + i * es, dt, acc);
    }
}

/* --------------------------------------------------------- collectives */

enum { K_ALL_REDUCE = 1, K_BROADCAST, K_ALL_GATHER };
static const char *const KIND_NAMES[] = {"?", "all_reduce", "broadcast", "all_gather"};
static const char *const OP_NAMES[] = {"sum", "prod", "max", "min"};

static void describe(const coll_desc *d, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s(count=%llu, %s", KIND_NAMES[d->kind <= K_ALL_GATHER ? d->kind : 0],
                     (unsigned long long)d->count, sim_dtype_name((sim_dtype)d->dtype));
    if (k < 0 || (size_t)k >= n) return;
    if (d->kind == K_ALL_REDUCE) snprintf(buf + k, n - (size_t)k, ", %s)", OP_NAMES[d->op]);
    else if (d->kind == K_BROADCAST) snprintf(buf + k, n - (size_t)k, ", root=%d)", (int)d->root);
    else snprintf(buf + k, n - (size_t)k, ")");
}

static sim_ccl_status begin(sim_ccl_comm *c, const char *kernel, const coll_desc *d, const char *fn) {
    if (sim_require_init(fn) != SIM_OK) return SIM_CCL_E_INVALID;
    if (!sim_ccl_valid(c)) return fail_invalid(fn, "not a live communicator (destroyed, or never created)");
    if (c->broken) {
        sim_fail(SIM_E_DEVICE, fn, "communicator '%s' failed earlier; destroy it and create a new one",
                 c->name);
        return SIM_CCL_E_PEER;
    }
    if (d->dtype >= SIM_DTYPE_COUNT) return fail_invalid(fn, "unknown dtype");
    if (d->count > (uint64_t)1 << 40) return fail_invalid(fn, "count is implausibly large");
    sim_status s = sim_launch(kernel, fn);
    if (s != SIM_OK) {
        /* a device fault on this rank: tell the peers, so they do not wait */
        char why[128];
        snprintf(why, sizeof why, "device fault in %s", kernel);
        publish_failure(c, why);
        return from_sim(s);
    }
    return SIM_CCL_OK;
}

/* After the first barrier: every rank must be making the same call. */
static sim_ccl_status same_call(sim_ccl_comm *c, int p, const char *fn) {
    const coll_desc *me = &c->h->desc[p][c->rank];
    for (int k = 0; k < c->nranks; k++) {
        const coll_desc *o = &c->h->desc[p][k];
        if (o->kind != me->kind || o->dtype != me->dtype || o->count != me->count ||
            o->op != me->op || o->root != me->root) {
            char a[96], b[96];
            describe(me, a, sizeof a);
            describe(o, b, sizeof b);
            c->broken = 1;
            sim_fail(SIM_E_DATA, fn, "mismatched collectives on communicator '%s': rank %d called %s, "
                     "rank %d called %s", c->name, c->rank, a, k, b);
            return SIM_CCL_E_INVALID;
        }
    }
    return SIM_CCL_OK;
}

static sim_ccl_status resolve(uint64_t addr, size_t nbytes, char **p, const char *fn, const char *what) {
    if (!nbytes) {
        *p = NULL;
        return SIM_CCL_OK;
    }
    sim_status s = sim_resolve(addr, nbytes, p, fn, what);
    return s == SIM_OK ? SIM_CCL_OK : SIM_CCL_E_INVALID;
}

/* One collective, chunk by chunk: `put` fills this rank's slot (or not),
 * all meet, `take` reads the slots into device memory.  Slots come in two
 * sets used in turn, so no second meeting is needed before a slot is
 * written again: a rank writing set p has passed the meeting of the chunk
 * in between, which every rank reaches only after reading set p. */
typedef struct {
    sim_ccl_comm *c;
    const coll_desc *d;
    char *send, *recv;
    size_t es;
} coll;

static char *slot(const sim_ccl_comm *c, int p, int rank) {
    return c->slots + ((size_t)p * (size_t)c->nranks + (size_t)rank) * c->slot_bytes;
}

static void put(const coll *x, int p, size_t off, size_t m) {
    sim_ccl_comm *c = x->c;
    if (x->d->kind == K_BROADCAST && c->rank != x->d->root) return;
    memcpy(slot(c, p, c->rank), x->send + off * x->es, m * x->es);
}

static void take(const coll *x, int p, size_t off, size_t m) {
    sim_ccl_comm *c = x->c;
    const coll_desc *d = x->d;
    size_t es = x->es;
    if (d->kind == K_ALL_REDUCE) {
        const char *srcs[SIM_CCL_MAX_RANKS];
        for (int k = 0; k < c->nranks; k++) srcs[k] = slot(c, p, k);
        reduce_into(x->recv + off * es, srcs, c->nranks, m, (sim_dtype)d->dtype, (sim_ccl_op)d->op,
                    c->scratch);
    } else if (d->kind == K_BROADCAST) {
        if (c->rank != d->root) memcpy(x->recv + off * es, slot(c, p, d->root), m * es);
    } else {
        for (int k = 0; k < c->nranks; k++)
            memcpy(x->recv + ((size_t)k * d->count + off) * es, slot(c, p, k), m * es);
    }
}

static sim_ccl_status run(sim_ccl_comm *c, const coll_desc *d, char *send, char *recv, const char *fn) {
    coll x = {c, d, send, recv, sim_dtype_size((sim_dtype)d->dtype)};
    size_t per = c->slot_bytes / x.es;
    const char *what = KIND_NAMES[d->kind];
    sim_ccl_status st;
    for (size_t off = 0; off < d->count; off += per) {
        size_t m = d->count - off < per ? d->count - off : per;
        int p = c->parity;
        if (off == 0) c->h->desc[p][c->rank] = *d;
        put(&x, p, off, m);
        if ((st = barrier(c, fn, what))) return st;
        c->parity = p ^ 1;
        if (off == 0 && (st = same_call(c, p, fn))) return st;
        take(&x, p, off, m);
    }
    return SIM_CCL_OK;
}

sim_ccl_status sim_ccl_all_reduce(sim_ccl_comm *c, uint64_t send, uint64_t recv, size_t count,
                                  sim_dtype dt, sim_ccl_op op, const char *fn) {
    if ((unsigned)op >= SIM_CCL_OP_COUNT) return fail_invalid(fn, "unknown reduction");
    coll_desc d = {K_ALL_REDUCE, (uint32_t)dt, (uint32_t)op, -1, count};
    sim_ccl_status st = begin(c, "ccl_all_reduce", &d, fn);
    if (st) return st;
    if ((dt == SIM_F16 || dt == SIM_BF16) && !c->scratch) {
        c->scratch = malloc(c->slot_bytes / 2 * sizeof(float));
        if (!c->scratch) {
            publish_failure(c, "out of host memory");
            sim_fail(SIM_E_OOM, fn, "out of host memory for the reduction buffer");
            return SIM_CCL_E_SYSTEM;
        }
    }
    size_t n = count * sim_dtype_size(dt);
    char *s, *r;
    if ((st = resolve(send, n, &s, fn, "send buffer")) || (st = resolve(recv, n, &r, fn, "recv buffer")))
        return st;
    return run(c, &d, s, r, fn);
}

sim_ccl_status sim_ccl_broadcast(sim_ccl_comm *c, uint64_t send, uint64_t recv, size_t count,
                                 sim_dtype dt, int root, const char *fn) {
    if (sim_ccl_valid(c) && (root < 0 || root >= c->nranks)) {
        sim_fail(SIM_E_INVALID_VALUE, fn, "root=%d is not a rank (0..%d)", root, c->nranks - 1);
        return SIM_CCL_E_INVALID;
    }
    coll_desc d = {K_BROADCAST, (uint32_t)dt, 0, root, count};
    sim_ccl_status st = begin(c, "ccl_broadcast", &d, fn);
    if (st) return st;
    size_t n = count * sim_dtype_size(dt);
    char *s = NULL, *r;
    /* only the root's send buffer is read */
    if ((c->rank == root && (st = resolve(send, n, &s, fn, "send buffer"))) ||
        (st = resolve(recv, n, &r, fn, "recv buffer")))
        return st;
    if ((st = run(c, &d, s, r, fn))) return st;
    if (c->rank == root && n && s != r) memmove(r, s, n);
    return SIM_CCL_OK;
}

sim_ccl_status sim_ccl_all_gather(sim_ccl_comm *c, uint64_t send, uint64_t recv, size_t count,
                                  sim_dtype dt, const char *fn) {
    coll_desc d = {K_ALL_GATHER, (uint32_t)dt, 0, -1, count};
    sim_ccl_status st = begin(c, "ccl_all_gather", &d, fn);
    if (st) return st;
    size_t n = count * sim_dtype_size(dt);
    char *s, *r;
    if ((st = resolve(send, n, &s, fn, "send buffer")) ||
        (st = resolve(recv, n * (size_t)c->nranks, &r, fn, "recv buffer")))
        return st;
    /* in place means send is this rank's block of recv; any other overlap is a bug */
    if (n && s + n > r && s < r + n * (size_t)c->nranks && s != r + n * (size_t)c->rank)
        return fail_invalid(fn, "send buffer overlaps the recv buffer other than at this rank's block");
    return run(c, &d, s, r, fn);
}
