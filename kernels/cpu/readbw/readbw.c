/* xengine_block._readbw: the machine's streaming read bandwidth, measured in the calling run.
 *
 * The memory side of the correlator's roofline (bench/correlator.py: machine_read_gbps): each
 * of nthreads threads reads its own slice of one buffer (first touched by that thread, so its
 * pages sit on the thread's NUMA node) with the widest loads the CPU has (AVX-512 zmm, else AVX2
 * ymm, else SSE2 xmm), summing them into 8 independent accumulators so that the loads, not the
 * adds, are the limit and the compiler cannot drop them. The buffer is sized by the caller to
 * be much larger than the last-level cache, so every pass streams from DRAM. A start line releases
 * the threads together; each reports its wall time and its own CPU time.
 *
 * Kept apart from _native (the correlator kernels) because it measures the machine, not our
 * code: benchmarks of capture, pipeline and reprocessing use it too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(_M_X64)
#define RB_X86 1
#include <immintrin.h>
#endif

typedef uint64_t (*rb_read_fn)(const unsigned char *p, size_t n);

#ifndef RB_X86
/* Portable loop: 8 independent 64-bit accumulators over 64-byte lines. */
static uint64_t read_u64(const unsigned char *p, size_t n)
{
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 8 <= n / 8; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += q[i + k];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}
#endif

#ifdef RB_X86
__attribute__((target("sse2")))
static uint64_t read_sse2(const unsigned char *p, size_t n)
{
    __m128i a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm_setzero_si128();
    for (size_t i = 0; i + 128 <= n; i += 128)
        for (int k = 0; k < 8; k++)
            a[k] = _mm_add_epi64(a[k], _mm_load_si128((const __m128i *)(p + i + 16 * k)));
    uint64_t out[2], s = 0;
    for (int k = 0; k < 8; k++) {
        _mm_storeu_si128((__m128i *)out, a[k]);
        s += out[0] + out[1];
    }
    return s;
}
#endif

#if defined(RB_X86) && defined(XE_HAVE_AVX2)
__attribute__((target("avx2")))
static uint64_t read_avx2(const unsigned char *p, size_t n)
{
    __m256i a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm256_setzero_si256();
    for (size_t i = 0; i + 256 <= n; i += 256)
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_add_epi64(a[k], _mm256_load_si256((const __m256i *)(p + i + 32 * k)));
    uint64_t out[4], s = 0;
    for (int k = 0; k < 8; k++) {
        _mm256_storeu_si256((__m256i *)out, a[k]);
        s += out[0] + out[1] + out[2] + out[3];
    }
    return s;
}
#endif

/* XE_HAVE_AVX512VNNI: setup.py's probe that the compiler accepts avx512f (and more). */
#if defined(RB_X86) && defined(XE_HAVE_AVX512VNNI)
__attribute__((target("avx512f")))
static uint64_t read_avx512(const unsigned char *p, size_t n)
{
    __m512i a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm512_setzero_si512();
    for (size_t i = 0; i + 512 <= n; i += 512)
        for (int k = 0; k < 8; k++)
            a[k] = _mm512_add_epi64(a[k], _mm512_load_si512((const void *)(p + i + 64 * k)));
    uint64_t s = 0;
    for (int k = 0; k < 8; k++)
        s += (uint64_t)_mm512_reduce_add_epi64(a[k]);
    return s;
}
#endif

/* The widest loop this CPU runs (libgcc's __builtin_cpu_supports checks XCR0 as well). */
static rb_read_fn widest(const char **what)
{
#if defined(RB_X86) && defined(XE_HAVE_AVX512VNNI)
    if (__builtin_cpu_supports("avx512f")) {
        *what = "AVX-512 zmm loads (vmovdqa64 + vpaddq, 8 accumulators)";
        return read_avx512;
    }
#endif
#if defined(RB_X86) && defined(XE_HAVE_AVX2)
    if (__builtin_cpu_supports("avx2")) {
        *what = "AVX2 ymm loads (vmovdqa + vpaddq, 8 accumulators)";
        return read_avx2;
    }
#endif
#ifdef RB_X86
    *what = "SSE2 xmm loads (movdqa + paddq, 8 accumulators)";
    return read_sse2;
#else
    *what = "64-bit scalar loads (8 accumulators)";
    return read_u64;
#endif
}

/* The start line: threads report ready, then wait until the caller says go (or abort). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready, go, abort;
} rb_start;

typedef struct {
    rb_read_fn fn;
    unsigned char *p;
    size_t n;
    long passes;
    rb_start *start;
    double wall, cpu;
    uint64_t sum;
} rb_arg;

static double now(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *rb_thread(void *arg)
{
    rb_arg *a = arg;
    memset(a->p, 0x5a, a->n);       /* first touch: pages local to this thread, not zero pages */
    a->sum = a->fn(a->p, a->n);     /* warm-up pass: TLB and prefetchers */
    rb_start *st = a->start;
    pthread_mutex_lock(&st->lock);
    st->ready++;
    pthread_cond_broadcast(&st->cond);
    while (!st->go)
        pthread_cond_wait(&st->cond, &st->lock);
    const int abort = st->abort;
    pthread_mutex_unlock(&st->lock);
    if (abort)
        return NULL;
    const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < a->passes; i++)
        a->sum += a->fn(a->p, a->n);
    a->cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    a->wall = now(CLOCK_MONOTONIC) - w0;
    return NULL;
}

PyDoc_STRVAR(read_bandwidth_doc,
"read_bandwidth(nthreads, nbytes, passes) -> (bytes/s, bytes per CPU second, loads, checksum)\n\n"
"nthreads threads, started together, each read its own nbytes/nthreads slice of a fresh\n"
"buffer passes times (after one untimed pass) with the widest loads the CPU has. bytes/s:\n"
"all bytes read over the slowest thread's wall time; bytes per CPU second: over the threads'\n"
"mean CPU time (what the threads read while they ran: insensitive to time slicing). Make\n"
"nbytes much larger than the last-level cache.");

static PyObject *py_read_bandwidth(PyObject *self, PyObject *args)
{
    int nthreads;
    Py_ssize_t nbytes;
    long passes;
    (void)self;
    if (!PyArg_ParseTuple(args, "inl", &nthreads, &nbytes, &passes))
        return NULL;
    if (nthreads < 1 || nthreads > 1024 || passes < 1 || nbytes < 4096L * nthreads)
        return PyErr_Format(PyExc_ValueError, "bad nthreads=%d, nbytes=%zd or passes=%ld",
                            nthreads, nbytes, passes);
    const char *what = "";
    const rb_read_fn fn = widest(&what);
    const size_t slice = ((size_t)nbytes / nthreads) & ~(size_t)4095;  /* whole pages */
    unsigned char *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, slice * nthreads) != 0)
        return PyErr_NoMemory();
    rb_arg *a = calloc(nthreads, sizeof *a);
    pthread_t *tid = calloc(nthreads, sizeof *tid);
    if (!a || !tid) {
        free(buf), free(a), free(tid);
        return PyErr_NoMemory();
    }
    rb_start st = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
    int started = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < nthreads; i++) {
        a[i] = (rb_arg){fn, buf + slice * i, slice, passes, &st, 0, 0, 0};
        if (pthread_create(&tid[i], NULL, rb_thread, &a[i]) != 0)
            break;
        started++;
    }
    pthread_mutex_lock(&st.lock);
    while (st.ready < started)
        pthread_cond_wait(&st.cond, &st.lock);
    st.abort = started < nthreads;
    st.go = 1;
    pthread_cond_broadcast(&st.cond);
    pthread_mutex_unlock(&st.lock);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    Py_END_ALLOW_THREADS
    double slowest = 0, cpu = 0;
    uint64_t sum = 0;
    for (int i = 0; i < started; i++) {
        slowest = a[i].wall > slowest ? a[i].wall : slowest;
        cpu += a[i].cpu;
        sum += a[i].sum;
    }
    free(buf), free(a), free(tid);
    if (started < nthreads || slowest <= 0 || cpu <= 0)
        return PyErr_Format(PyExc_RuntimeError, "could only start %d of %d threads", started,
                            nthreads);
    const double bytes = (double)slice * nthreads * passes;
    return Py_BuildValue("(ddsK)", bytes / slowest, bytes / (cpu / nthreads), what,
                         (unsigned long long)sum);
}

static PyMethodDef methods[] = {
    {"read_bandwidth", py_read_bandwidth, METH_VARARGS, read_bandwidth_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_readbw",
    "The machine's streaming read bandwidth with the widest loads the CPU has; see readbw.c.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__readbw(void)
{
    return PyModule_Create(&moduledef);
}
