/* The correlate engine: a call's plan, its units of work and the worker threads that run them.
 *
 * Work is cut into units (channel, chunk of kt K-steps of 64 spectra). Worker threads (the
 * caller's among them) take units in channel-major order from a shared counter; for each one
 *   1. the chunk's input is converted into Y tiles (xcorr.h) in the thread's own
 *      cache-resident scratch (the layout work, at memory speed: frames here, any layout in
 *      layout.c);
 *   2. for AMX and VNNI each Y tile is packed into the VNNI "B" layout [K/4][16][4], the
 *      4-byte transpose of the tile (for VNNI also biased by +128, see kern_avx512.c); for ci8
 *      frames whose packets hold a multiple of 4 groups, steps 1 and 2 are one pass per whole
 *      K-step, the tile never leaving registers between them (xe_build_tiles_avx512); for
 *      AVX2 the tiles are widened to int16 instead (xe_widen_avx2);
 *   3. the ISA kernel runs over the Hermitian triangle of 16-stream super-block pairs, adding
 *      into int32 accumulator tiles that persist across the channel's chunks.
 * When a thread moves on to another channel it adds its accumulators (re = rr + ii,
 * im = ir - ri, in int64) into the packed triangle under a lock; two threads may both hold
 * partial sums of one channel. int32 accumulation is exact for P <= Geometry.max_npacket.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

typedef struct {
    const xe_plan *plan;
    const int8_t *frames;
    int32_t *out;
    int layout_only;   /* time the layout: convert and pack only */
    int compute_only;  /* time the kernels: convert each thread's first unit only */
    long next_unit;
    pthread_mutex_t lock;
    xe_kernel_fn kernel;
    xe_copy_fn copy;
    xe_count_fn count;  /* the extremes count of the tiles (input health) */
    int pack_b, bias;
    int widen;         /* AVX2: the Y tiles widened to int16 once per unit (xe_widen_avx2) */
    int build;         /* whole K-steps built and packed in one pass (xe_build_tiles_avx512) */
    void (*tile_config)(void);   /* AMX paths: per-thread tile configuration, else NULL */
    void (*tile_release)(void);
    int (*tile_fault)(char *msg, size_t n);  /* emulated AMX: the thread's first #GP/#UD */
    int64_t *extremes;   /* [S] the call's extremes counts, added to (under lock); NULL: none */
    int8_t ext_lo, ext_hi;  /* the quantiser's extremes: -128, 127 (ci8) or -8, 7 (ci4) */
    int failed;
    int value_error;     /* the failure is the input's (a ci16 value out of range) */
    char error[256];     /* why a worker failed, if not for memory (under lock) */
    double cpu_seconds;  /* summed over the workers (under lock) */
} xe_job;

static inline int stream_end(const xe_plan *p, int sb)
{
    return 16 * sb + 16 < p->nstream ? 16 * sb + 16 : p->nstream;
}

/* Frames -> Y tiles (step 1 above) for the unit's groups d0.. of the streams of super block
 * sb. A partial last K-step is cleared first: past the data it must read as zeros. */
static void convert_super_block(const xe_plan *p, xe_work *w, const int8_t *frames,
                                const xe_unit *un, int sb, xe_copy_fn copy, long d0)
{
    const size_t blk = xe_block_bytes(p);
    const long n = un->g1 - un->g0;
    if (d0 >= n)
        return;
    if (n % (XE_KSTEP / XE_GROUP))
        for (int i = 2 * sb; i < 2 * sb + 2; i++)
            memset(w->a + i * blk + (size_t)(n / 8) * XE_TILE_BYTES, 0, XE_TILE_BYTES);
    for (int s = 16 * sb; s < stream_end(p, sb); s++) {
        int8_t *re_row = w->a + (size_t)(s / 8) * blk + (size_t)(s % 8) * XE_KSTEP;
        long run;
        for (long g = un->g0 + d0; g < un->g1; g += run) {
            const int8_t *src = xe_group_src(p, frames, s, un->c, g, un->g1, &run);
            copy(src, re_row, g - un->g0, run);
        }
    }
}

/* Prefetch the source lines of super block sb of a unit into every cache level (L1 too: a
 * super block's ~16 KiB is read within the next block's conversion; measured 1.02-1.05x
 * against L2 only, AVX-512 VNNI). One stream's chunk is ~1 KiB, C * 960 bytes from the next
 * stream's: too short and too scattered for the hardware prefetchers, so without this the
 * conversion waits on DRAM latency line by line (measured ~1.6x slower). Issued one super
 * block ahead of the conversion. */
static void prefetch_super_block(const xe_plan *p, const int8_t *frames, const xe_unit *un,
                                 int sb)
{
    for (int s = 16 * sb; s < stream_end(p, sb); s++) {
        long run;
        for (long g = un->g0; g < un->g1; g += run) {
            const int8_t *src = xe_group_src(p, frames, s, un->c, g, un->g1, &run);
            const uintptr_t end = (uintptr_t)(src + run * p->group_bytes);
            for (uintptr_t a = (uintptr_t)src & ~(uintptr_t)63; a < end; a += 64)
                __builtin_prefetch((const void *)a, 0, 3);
        }
    }
}

/* Sum of Y row m of block i since the last write-out (the packing's lane m). */
static int64_t row_sum(const xe_work *w, int i, int m) { return w->rowsum[(size_t)i * 16 + m]; }

/* Add one thread's accumulators for channel c into the packed triangle (locked). */
static void flush(xe_job *job, const xe_work *w, int c)
{
    const xe_plan *p = job->plan;
    const long S = p->nstream;
    int32_t *out = job->out + (size_t)c * (size_t)(S * (S + 1) / 2) * 2;
    pthread_mutex_lock(&job->lock);
    for (int sp = 0; sp < p->nsp; sp++) {
        for (int sub = 0; sub < 4; sub++) {
            int I, M;
            int32_t *t;
            if (!xe_sub_block(p, w->acc, sp, sub, &I, &M, &t))
                continue;
            for (int m = 0; m < 8 && 8 * I + m < S; m++) {
                const long j = 8 * I + m;
                const int64_t rs_re = job->bias ? row_sum(w, I, m) : 0;
                const int64_t rs_im = job->bias ? row_sum(w, I, m + 8) : 0;
                const int64_t re_bias = 128 * (rs_re + rs_im), im_bias = 128 * (rs_im - rs_re);
                for (int n = 0; n < 8 && 8 * M + n < S; n++) {
                    const long k = 8 * M + n;
                    if (j > k)
                        continue;
                    const int64_t re = (int64_t)t[m * 16 + n] + t[(m + 8) * 16 + n + 8] - re_bias;
                    const int64_t im = (int64_t)t[(m + 8) * 16 + n] - t[m * 16 + n + 8] - im_bias;
                    int32_t *o = out + 2 * (k * (k + 1) / 2 + j);
                    o[0] = (int32_t)(o[0] + re);
                    o[1] = (int32_t)(o[1] + im);
                }
            }
        }
    }
    pthread_mutex_unlock(&job->lock);
}

static void work_free(xe_work *w)
{
    free(w->ext);
    free(w->a);
    free(w->b);
    free(w->acc);
    free(w->rowsum);
    free((void *)w->rows);
}

static int work_alloc(const xe_plan *p, xe_work *w, size_t b_per_a)
{
    const size_t ybytes = (size_t)p->nb8 * xe_block_bytes(p);
    memset(w, 0, sizeof *w);
    w->a = aligned_alloc(64, ybytes);
    w->b = b_per_a ? aligned_alloc(64, b_per_a * ybytes) : NULL;
    w->acc = aligned_alloc(64, (size_t)p->nsp * 4 * XE_TILE_BYTES);
    w->rowsum = aligned_alloc(64, (size_t)p->nb8 * 16 * sizeof(int32_t));
    w->rows = p->lay ? malloc((size_t)p->kt * XE_KSTEP * sizeof *w->rows) : NULL;
    if (!w->a || (b_per_a && !w->b) || !w->acc || !w->rowsum || (p->lay && !w->rows)) {
        work_free(w);
        return -1;
    }
    memset(w->a, 0, ybytes);  /* padding streams stay zero for the whole call */
    return 0;
}

static int take_unit(xe_job *job, xe_unit *un)
{
    const xe_plan *p = job->plan;
    const long per_chunk = (long)p->kt * (XE_KSTEP / XE_GROUP);
    const long u = __atomic_fetch_add(&job->next_unit, 1, __ATOMIC_RELAXED);
    if (u >= (long)p->nchan * p->nchunk)
        return 0;
    un->c = (int)(u / p->nchunk);
    if (p->lay) {  /* any layout: chunks of spectra */
        const long spec = (long)p->kt * XE_KSTEP;
        un->t0 = (u % p->nchunk) * spec;
        un->t1 = un->t0 + spec < p->lay->nspec ? un->t0 + spec : p->lay->nspec;
        un->nt = (int)((un->t1 - un->t0 + XE_KSTEP - 1) / XE_KSTEP);
        un->g0 = un->g1 = 0;
        return 1;
    }
    un->g0 = (u % p->nchunk) * per_chunk;
    un->g1 = un->g0 + per_chunk < p->ngroup ? un->g0 + per_chunk : p->ngroup;
    un->nt = (int)((un->g1 - un->g0 + 7) / 8);
    return 1;
}

/* Parts at the quantiser's extremes, portable C (xcorr.h, xe_count_fn): counted from the Y
 * tiles just built, which every path shares and which are still in cache, so every path
 * counts the same and no pass over the input is added. Zeros (the padding of a partial
 * K-step, missing data) are no extremes. */
void xe_count_extremes_c(const xe_plan *p, xe_work *w, int nt, int i0, int i1, int8_t lo,
                         int8_t hi)
{
    const size_t blk = xe_block_bytes(p);
    for (int i = i0; i < i1; i++) {
        int64_t n[8] = {0};
        for (int t = 0; t < nt; t++) {
            const int8_t *tile = w->a + (size_t)i * blk + (size_t)t * XE_TILE_BYTES;
            for (int m = 0; m < 16; m++) {
                const int8_t *row = tile + 64 * m;
                int c = 0;
                for (int k = 0; k < 64; k++)
                    c += (row[k] == lo) | (row[k] == hi);
                n[m & 7] += c;
            }
        }
        for (int m = 0; m < 8; m++)
            w->ext[8 * i + m] += n[m];
    }
}

/* What the kernel needs beyond the converted Y tiles of blocks [i0, i1): K-steps [t0, nt)
 * VNNI-packed (AMX, VNNI; the one-pass build packed those before t0), or all nt widened to
 * int16 (AVX2). */
static void finish_tiles(const xe_job *job, xe_work *w, int t0, int nt, int i0, int i1)
{
#ifdef XE_HAVE_AVX512_LAYOUT
    if (job->pack_b)
        xe_pack_b_avx512(job->plan, w, t0, nt, i0, i1, job->bias);
#endif
#ifdef XE_HAVE_AVX2
    if (job->widen)
        xe_widen_avx2(job->plan, w, nt, i0, i1);
#endif
}

/* One unit: convert and pack every super block, its successor's source prefetched as it goes
 * (the one-pass build; else a prefetch pass first), then the kernel over all pairs, then
 * prefetch the next unit's first super block into L1 (the build of the last super block has
 * already asked for it in L2).
 * The phases are kept apart: converting super block L + 1 between the pairs of column L, to
 * overlap its memory reads with the tile products, was slower on AMX (the conversion's misses
 * hold the line fill buffers that the tile loads from L2 need), and so was prefetching the
 * next unit's source a slice after each super pair on AVX-512 VNNI (docs/native.md, "What
 * limits it"). */
static void process_unit(xe_job *job, xe_work *w, const xe_unit *un, const xe_unit *next,
                         int convert)
{
    const xe_plan *p = job->plan;
    const int nsb = p->nb8 / 2;
    const int whole = job->build ? (int)((un->g1 - un->g0) / (XE_KSTEP / XE_GROUP)) : 0;
    if (convert && p->lay) {  /* any layout: every block, then the VNNI packing */
        xe_convert_layout(p, w, job->frames, un);
        if (w->ext && job->count)
            job->count(p, w, un->nt, 0, p->nb8, job->ext_lo, job->ext_hi);
        finish_tiles(job, w, 0, un->nt, 0, p->nb8);
    }
    for (int L = 0; convert && !p->lay && L < nsb; L++) {
        if (L + 1 < nsb && !whole)  /* the one-pass build prefetches as it goes */
            prefetch_super_block(p, job->frames, un, L + 1);
#ifdef XE_HAVE_AVX512_LAYOUT
        if (whole)
            xe_build_tiles_avx512(p, w, job->frames, un, next, L, whole, job->bias);
#endif
        convert_super_block(p, w, job->frames, un, L, job->copy,
                            (long)whole * (XE_KSTEP / XE_GROUP));
        if (w->ext && job->count)
            job->count(p, w, un->nt, 2 * L, 2 * L + 2, job->ext_lo, job->ext_hi);
        finish_tiles(job, w, whole, un->nt, 2 * L, 2 * L + 2);
    }
    if (!job->layout_only)
        job->kernel(p, w, un->nt, 0, p->nsp);
    if (convert && next && !p->lay)
        prefetch_super_block(p, job->frames, next, 0);
}

static void *worker(void *arg)
{
    xe_job *job = arg;
    const xe_plan *p = job->plan;
    const double cpu0 = xe_thread_cpu();
    xe_work w;
    if (work_alloc(p, &w, job->pack_b ? 1 : job->widen ? 2 : 0) != 0) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    if (job->extremes && !(w.ext = calloc((size_t)p->nb8 * 8, sizeof *w.ext))) {
        work_free(&w);
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    w.ext_lo = job->ext_lo;
    w.ext_hi = job->ext_hi;
    if (job->tile_config && !job->layout_only)
        job->tile_config();  /* tile configuration is per thread */
    xe_unit un, next;
    int cur = -1, have = take_unit(job, &un), converted = 0;
    if (have && !p->lay)
        prefetch_super_block(p, job->frames, &un, 0);
    while (have) {
        const int have_next = take_unit(job, &next);
        if (un.c != cur) {
            if (cur >= 0 && !job->layout_only)
                flush(job, &w, cur);
            memset(w.acc, 0, (size_t)p->nsp * 4 * XE_TILE_BYTES);
            memset(w.rowsum, 0, (size_t)p->nb8 * 16 * sizeof(int32_t));
            cur = un.c;
        }
        process_unit(job, &w, &un, have_next ? &next : NULL,
                     !job->compute_only || !converted++);
        un = next;
        have = have_next;
    }
    if (cur >= 0 && !job->layout_only)
        flush(job, &w, cur);
    if (job->tile_release && !job->layout_only)
        job->tile_release();
    const int bad = w.bad, bad_value = w.bad_value;
    if (w.ext) {
        pthread_mutex_lock(&job->lock);
        for (int s = 0; s < p->nstream; s++)
            job->extremes[s] += w.ext[s];
        pthread_mutex_unlock(&job->lock);
    }
    work_free(&w);
    char fault[200];
    const int faulted = job->tile_fault && job->tile_fault(fault, sizeof fault);
    const double cpu = xe_thread_cpu() - cpu0;
    pthread_mutex_lock(&job->lock);
    job->cpu_seconds += cpu;
    if (bad && !job->error[0]) {
        snprintf(job->error, sizeof job->error, "ci16 sample value %d is outside -128..127: "
                 "16-bit samples are correlated exactly only in the int8 range", bad_value);
        job->failed = job->value_error = 1;
    }
    if (faulted && !job->error[0]) {
        snprintf(job->error, sizeof job->error, "%s: the AMX kernel faulted on the emulated "
                 "tiles: %s", xe_isa_names[p->isa], fault);
        job->failed = 1;
    }
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

/* Fill the job's ISA-specific hooks for samples of `bits` (8, or 4 with re in the low nibble
 * if re_low); 0 if the ISA was not compiled in. */
static int select_hooks(xe_job *job, enum xe_isa isa, int bits, int re_low)
{
    job->kernel = xe_kernel_scalar;
    job->count = xe_count_extremes_c;
    job->copy = bits == 8 ? xe_copy_groups_c : re_low ? xe_copy_ci4_lo_c : xe_copy_ci4_hi_c;
    job->pack_b = job->bias = job->build = job->widen = 0;
    job->tile_config = job->tile_release = NULL;
    job->tile_fault = NULL;
#ifdef XE_HAVE_AVX512_LAYOUT
    if (isa == XE_AVX512VNNI || isa == XE_AMX || isa == XE_AMX_EMU) {
        /* AVX-512 frame copies and VNNI packing; one-pass tiles for frames (not any layout)
         * of ci8 with whole K-steps inside packets */
        job->copy = bits == 8 ? xe_copy_groups_avx512 : re_low ? xe_copy_ci4_lo_avx512
            : xe_copy_ci4_hi_avx512;
        job->pack_b = 1;
        job->count = NULL;  /* counted in the packing and the one-pass build */
        job->build = !job->plan->lay && bits == 8 && job->plan->ncoarse % 4 == 0;
    }
#endif
    switch (isa) {
    case XE_SCALAR:
        return 1;
#ifdef XE_HAVE_AVX2
    case XE_AVX2:
        job->kernel = xe_kernel_avx2;
        job->count = NULL;  /* counted in the widening */
        job->widen = 1;
        return 1;
#endif
#ifdef XE_HAVE_AVX512VNNI
    case XE_AVX512VNNI:
        job->kernel = xe_kernel_vnni;
        job->bias = 1;
        return 1;
#endif
#ifdef XE_HAVE_AMX
    case XE_AMX:
        job->kernel = xe_kernel_amx;
        job->tile_config = xe_amx_tile_config;
        job->tile_release = xe_amx_tile_release;
        return 1;
#endif
#ifdef XE_HAVE_AMX_EMU
    case XE_AMX_EMU:  /* the AMX path, instruction for instruction, on software tiles */
        job->kernel = xe_kernel_amx_emu;
        job->tile_config = xe_amx_tile_config_emu;
        job->tile_release = xe_amx_tile_release_emu;
        job->tile_fault = xe_amx_emu_fault;
        return 1;
#endif
    default:
        return 0;
    }
}

/* Run the job on nthreads threads (the caller's thread is one of them). */
static int run_job(xe_job *job, int nthreads)
{
    pthread_t tid[256];
    int started = 0;
    if (nthreads > 256)
        nthreads = 256;
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&tid[started], NULL, worker, job) != 0)
            break;  /* fewer threads: the shared counter still covers every unit */
        started++;
    }
    worker(job);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    return job->failed ? -1 : 0;
}

/* Super pairs (J <= L) of 16-stream super blocks, L-major so the B side stays cached. */
static uint16_t *super_pairs(int nsb, int *nsp)
{
    *nsp = nsb * (nsb + 1) / 2;
    uint16_t *list = malloc(2 * (size_t)*nsp * sizeof(uint16_t));
    if (!list)
        return NULL;
    int q = 0;
    for (int L = 0; L < nsb; L++)
        for (int J = 0; J <= L; J++, q++) {
            list[q] = (uint16_t)J;
            list[*nsp + q] = (uint16_t)L;
        }
    return list;
}

/* Which groups of streams lie side by side for the AVX2 transposes (ci8: 16 streams of
 * (re, im) pairs, im_offset 1; ci4: 32 bytes); NULL with no such group (or no memory: every
 * stream is then gathered on its own, which is as exact). */
static uint8_t *side_by_side(xe_layout *L, int S)
{
    L->group = L->enc == XE_CI8 && L->im_offset == 1 ? 16 : L->enc == XE_CI4 ? 32 : 0;
    if (!L->group)
        return NULL;
    const int step = L->enc == XE_CI8 ? 2 : 1, ngroup = S / L->group;
    uint8_t *run = calloc((size_t)ngroup + 1, 1);
    if (!run)
        return NULL;
    int any = 0;
    for (int g = 0; g < ngroup; g++) {
        run[g] = 1;
        for (int i = 1; i < L->group; i++)
            if (L->stream_off[g * L->group + i] != L->stream_off[g * L->group] + step * i)
                run[g] = 0;
        any |= run[g];
    }
    if (!any) {
        free(run);
        return NULL;
    }
    return run;
}

/* Largest |re| or |im| of one complex product term a conj(b) for samples of `bits`: 2 x 128^2
 * for ci8, 2 x 8^2 for ci4. */
static long max_complex_term(int bits) { return bits == 8 ? 2L * 128 * 128 : 2L * 8 * 8; }

/* Every accumulation (int32 tiles, the biased VNNI sums, their int64 correction cast back
 * to int32) is exact modulo 2^32, so the output is exact whenever the true value fits in
 * int32: up to INT32_MAX / max_complex_term spectra per call (Geometry.max_npacket: 65535
 * for ci8, 16.7 M for ci4). Beyond that a result could wrap, so refuse. */
static int check_spectra(size_t nspec, int bits, xe_error *err)
{
    const size_t max_spec = (size_t)(INT32_MAX / max_complex_term(bits));
    if (nspec > max_spec)
        return xe_fail(err, XE_ERR_VALUE, "%zu spectra in one call can overflow int32; at most "
                       "%zu for %d-bit samples", nspec, max_spec, bits);
    return 0;
}

static int check_common(const xe_call *call, int S, int C, xe_error *err)
{
    if (S < 1 || S > 8 * 65535 || C < 1 || call->nthreads < 1 || call->kt < 0 || call->kt > 1024)
        return xe_fail(err, XE_ERR_VALUE, "bad sizes: nstream=%d nchan=%d nthreads=%d kt=%d",
                       S, C, call->nthreads, call->kt);
    return 0;
}

int xe_plan_frames(xe_plan *p, const xe_call *call, int S, int C, int ncoarse, size_t len,
                   const int64_t *stream_off, long nframe, int64_t frame_bytes, xe_error *err)
{
    memset(p, 0, sizeof *p);
    if (check_common(call, S, C, err) != 0)
        return -1;
    if (ncoarse < 1)
        return xe_fail(err, XE_ERR_VALUE, "bad sizes: ncoarse=%d", ncoarse);
    const int group_bytes = call->bits == 8 ? 2 * XE_GROUP : XE_GROUP;
    const size_t stream_bytes = (size_t)C * ncoarse * group_bytes;
    if (stream_off) {  /* streams anywhere in packet times of frame_bytes */
        if (nframe < 1 || frame_bytes < 1)
            return xe_fail(err, XE_ERR_VALUE, "stream_offsets need nframe >= 1 and "
                           "frame_bytes >= 1, got %ld and %lld", nframe, (long long)frame_bytes);
        for (int s = 0; s < S; s++)
            if (stream_off[s] < 0 || (size_t)(nframe - 1) * (size_t)frame_bytes
                    + (size_t)stream_off[s] + stream_bytes > len)
                return xe_fail(err, XE_ERR_VALUE, "stream %d at offset %lld: %ld frames of "
                               "%lld bytes reach past the %zu-byte buffer", s,
                               (long long)stream_off[s], nframe, (long long)frame_bytes, len);
        p->stream_off = stream_off;
        p->frame_stride = frame_bytes;
        p->nframe = nframe;
    } else {
        const size_t whole = (size_t)S * stream_bytes;
        if (len % whole)
            return xe_fail(err, XE_ERR_VALUE, "frames hold %zu bytes, not a whole number of "
                           "%zu-byte frames", len, whole);
        p->frame_stride = (int64_t)whole;
        p->nframe = (long)(len / whole);
    }
    if (check_spectra((size_t)p->nframe * (size_t)ncoarse * XE_GROUP, call->bits, err) != 0)
        return -1;
    p->nstream = S;
    p->nchan = C;
    p->ncoarse = ncoarse;
    p->group_bytes = group_bytes;
    p->chan_bytes = (size_t)ncoarse * group_bytes;
    p->kt = call->kt ? call->kt : XE_DEFAULT_KT;
    p->ngroup = p->nframe * ncoarse;
    p->nchunk = (p->ngroup + p->kt * 8 - 1) / (p->kt * 8);
    return 0;
}

int xe_plan_layout(xe_plan *p, xe_layout *L, const xe_call *call, int S, int C, long nframe,
                   size_t len, xe_error *err)
{
    memset(p, 0, sizeof *p);
    if (check_common(call, S, C, err) != 0)
        return -1;
    if (S < 2 || S % 2)
        return xe_fail(err, XE_ERR_VALUE, "stream_offsets must be an even number of int64 "
                       "(%d given)", S);
    const long fs = L->frame_spectra, tb = L->time_block;
    if (nframe < 1 || fs < 1 || tb < 1 || fs % tb || L->frame_bytes < 1 || L->chan_stride < 0
            || L->time_stride < 0 || L->block_stride < 0 || L->im_offset < 0)
        return xe_fail(err, XE_ERR_VALUE, "bad layout: nchan=%d nframe=%ld frame_spectra=%ld "
                       "time_block=%ld frame_bytes=%lld strides %lld %lld %lld im_offset=%d", C,
                       nframe, fs, tb, (long long)L->frame_bytes, (long long)L->chan_stride,
                       (long long)L->time_stride, (long long)L->block_stride, L->im_offset);
    /* the last byte any sample touches must lie in the buffer */
    int64_t lo = INT64_MAX, hi = 0;
    for (int s = 0; s < S; s++) {
        lo = L->stream_off[s] < lo ? L->stream_off[s] : lo;
        hi = L->stream_off[s] > hi ? L->stream_off[s] : hi;
    }
    const int64_t part = L->enc == XE_CI4 ? 0 : L->im_offset;
    const int64_t part_bytes = L->enc == XE_CI16 ? 2 : 1;
    const int64_t last = (int64_t)(nframe - 1) * L->frame_bytes + hi
        + (int64_t)(C - 1) * L->chan_stride + ((fs - 1) / tb) * L->block_stride
        + ((fs - 1) % tb) * L->time_stride + part + part_bytes - 1;
    if (lo < 0 || (L->enc != XE_CI4 && L->im_offset == 0) || last >= (int64_t)len)
        return xe_fail(err, XE_ERR_VALUE, "the layout reaches byte %lld of a %zu-byte buffer "
                       "(or has a negative offset or a zero im_offset)", (long long)last, len);
    L->nspec = nframe * fs;
    if (check_spectra((size_t)L->nspec, call->bits, err) != 0)
        return -1;
    p->nstream = S;
    p->nchan = C;
    p->kt = call->kt ? call->kt : XE_DEFAULT_KT;
    p->nchunk = (L->nspec + (long)p->kt * XE_KSTEP - 1) / ((long)p->kt * XE_KSTEP);
    p->lay = L;
    return 0;
}

int xe_run(xe_plan *p, const xe_call *call, const int8_t *input, int32_t *out,
           double *cpu_seconds, xe_error *err)
{
    const int S = p->nstream;
    p->nb8 = 2 * ((S + 15) / 16);
    p->isa = call->isa;
    p->nthreads = call->nthreads;
    uint8_t *run = NULL;
    if (p->lay) {
        xe_layout *L = (xe_layout *)p->lay;
        L->run = run = side_by_side(L, S);
        L->simd = 0;
#ifdef XE_HAVE_AVX2
        L->simd = call->isa != XE_SCALAR && run != NULL;
#endif
    }
    uint16_t *pairs = super_pairs(p->nb8 / 2, &p->nsp);
    if (!pairs) {
        free(run);
        return xe_fail(err, XE_ERR_MEMORY, "out of memory");
    }
    p->sp_j = pairs;
    p->sp_l = pairs + p->nsp;
    xe_job job = {0};
    job.plan = p;
    job.frames = input;
    job.out = out;
    job.layout_only = call->mode == XE_LAYOUT_ONLY;
    job.compute_only = call->mode == XE_COMPUTE_ONLY;
    job.extremes = call->mode == XE_FULL ? call->extremes : NULL;
    job.ext_lo = call->bits == 4 ? -8 : -128;
    job.ext_hi = call->bits == 4 ? 7 : 127;
    int rc = -1;
    if (!select_hooks(&job, p->isa, call->bits, call->re_low)) {
        xe_fail(err, XE_ERR_RUNTIME, "isa %d was not compiled in", (int)p->isa);
        goto done;
    }
    if (!job.layout_only && !call->accumulate)
        memset(out, 0, (size_t)p->nchan * ((size_t)S * (S + 1) / 2) * 2 * sizeof(int32_t));
    pthread_mutex_init(&job.lock, NULL);
    rc = run_job(&job, p->nthreads);
    pthread_mutex_destroy(&job.lock);
    if (rc != 0) {
        if (job.error[0])
            xe_fail(err, job.value_error ? XE_ERR_VALUE : XE_ERR_RUNTIME, "%s", job.error);
        else
            xe_fail(err, XE_ERR_MEMORY, "out of memory for the worker scratch");
    }
    *cpu_seconds = job.cpu_seconds;
done:
    free(pairs);
    free(run);
    return rc;
}
