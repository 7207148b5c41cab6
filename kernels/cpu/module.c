/* xengine_block._native: the Python bindings of the native correlator and host passes.
 *
 * Arguments are parsed by PyArg_ParseTupleAndKeywords alone: buffers through the converters
 * below (C-contiguous, typed, released by the parser itself if a later argument fails), names
 * of a fixed set (isa, mode, encoding, nibble order) through a table of choices. Each function
 * then checks shapes and types against a table (check_buffer), releases the GIL and calls the
 * plain-C code behind native.h, whose xe_error becomes the Python exception.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "native.h"

/* ------------------------------------------------------------------ argument converters */

/* O& converters of a buffer argument: C-contiguous with its format, read-only or writable.
 * They support the parser's cleanup, so every buffer is released on a parse failure; the
 * "opt" one takes None (view.obj stays NULL). */
static int get_buffer(PyObject *o, void *addr, int flags)
{
    Py_buffer *b = addr;
    if (!o) {  /* cleanup after a later argument failed */
        PyBuffer_Release(b);
        return 1;
    }
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | flags) != 0)
        return 0;
    return Py_CLEANUP_SUPPORTED;
}

static int buf_in(PyObject *o, void *addr) { return get_buffer(o, addr, 0); }
static int buf_out(PyObject *o, void *addr) { return get_buffer(o, addr, PyBUF_WRITABLE); }
static int buf_opt(PyObject *o, void *addr)
{
    if (o == Py_None)
        return 1;
    return get_buffer(o, addr, 0);
}

static int buf_out_opt(PyObject *o, void *addr)
{
    if (o == Py_None)
        return 1;
    return get_buffer(o, addr, PyBUF_WRITABLE);
}

static void release(Py_buffer *b, int n)
{
    for (int i = 0; i < n; i++)
        if (b[i].obj)
            PyBuffer_Release(&b[i]);
}

/* A name out of a fixed list; the O& converter `choose` sets value to its index. */
typedef struct {
    const char *what;
    const char *const *names;
    int value;
} choice;

static const char *const MODES[] = {"full", "layout", "compute", NULL};
static const char *const ENCODINGS[] = {"ci8", "ci4", "ci16", NULL};        /* enum xe_enc */
static const char *const NIBBLE_ORDERS[] = {"re_high", "re_low", NULL};     /* re_low 0/1 */

static int choose(PyObject *o, void *addr)
{
    choice *c = addr;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    if (!s) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", c->what);
        return 0;
    }
    char list[128] = "";
    for (int i = 0; c->names[i]; i++) {
        if (strcmp(s, c->names[i]) == 0) {
            c->value = i;
            return 1;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 c->names[i]);
    }
    PyErr_Format(PyExc_ValueError, "unknown %s '%s'; choose one of %s", c->what, s, list);
    return 0;
}

/* The isa argument: a runnable path's index (O& converter into an int). */
static int runnable_isa(PyObject *o, void *addr)
{
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    if (!s) {
        PyErr_SetString(PyExc_TypeError, "isa must be a str");
        return 0;
    }
    xe_error err;
    const int isa = xe_runnable_isa(s, &err);
    if (isa < 0) {
        PyErr_SetString(err.kind == XE_ERR_VALUE ? PyExc_ValueError : PyExc_RuntimeError,
                        err.msg);
        return 0;
    }
    *(int *)addr = isa;
    return 1;
}

/* ------------------------------------------------------------------ buffer checks */

/* What an argument's buffer must be: its element kind ('i' signed int, 'u' unsigned or bool,
 * 'f' float, 0 any), element size (0 any), dimensions (-1 any) and, for dims >= 0, its shape
 * (-1: any extent). */
typedef struct {
    const char *name;
    char kind;
    int itemsize, ndim;
    Py_ssize_t shape[4];
} buffer_spec;

static char kind_of(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (f[0] && f[1])
        return 0;
    return strchr("bhilq", f[0]) ? 'i' : strchr("BHILQ?", f[0]) ? 'u' : strchr("efd", f[0])
        ? 'f' : 0;
}

static const char *kind_name(char kind)
{
    return kind == 'i' ? "signed int" : kind == 'u' ? "unsigned int" : "float";
}

/* 0, or -1 with ValueError naming the argument and what it must be. */
static int check_buffer(const Py_buffer *b, const buffer_spec *s)
{
    int ok = (!s->kind || kind_of(b) == s->kind) && (!s->itemsize || b->itemsize == s->itemsize)
        && (s->ndim < 0 || b->ndim == s->ndim);
    for (int i = 0; ok && s->ndim > 0 && i < s->ndim; i++)
        ok = s->shape[i] < 0 || b->shape[i] == s->shape[i];
    if (ok)
        return 0;
    char want[128] = "";
    for (int i = 0; s->ndim > 0 && i < s->ndim; i++) {
        char d[24] = "n";
        if (s->shape[i] >= 0)
            snprintf(d, sizeof d, "%zd", s->shape[i]);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? ", " : " [", d);
    }
    if (s->ndim > 0)
        strcat(want, "]");
    PyErr_Format(PyExc_ValueError, "%s must be %s%d-byte %s%s (got itemsize %zd, format %s, "
                 "%d dims)", s->name, s->itemsize ? "" : "any ", s->itemsize,
                 s->kind ? kind_name(s->kind) : "elements", want, b->itemsize,
                 b->format ? b->format : "B", b->ndim);
    return -1;
}

/* The Python exception of an xe_error; NULL. */
static PyObject *set_error(const xe_error *err)
{
    if (err->kind == XE_ERR_MEMORY)
        return PyErr_NoMemory();
    PyErr_SetString(err->kind == XE_ERR_VALUE ? PyExc_ValueError : PyExc_RuntimeError, err->msg);
    return NULL;
}

/* ------------------------------------------------------------------ dispatch */

static PyObject *isa_dict(const xe_isa_table *t)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < XE_NISA; i++) {
        PyObject *v = Py_BuildValue("(OsO)", t->ok[i] ? Py_True : Py_False, t->why[i],
                                    t->refused[i] ? Py_True : Py_False);
        if (!v || PyDict_SetItemString(d, xe_isa_names[i], v) != 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *py_isa_status(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return isa_dict(xe_detected_isas());
}

static PyObject *py_cpu_facts(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    xe_cpu_facts f;
    if (!xe_read_cpu_facts(&f))
        Py_RETURN_NONE;
    return Py_BuildValue("(IIIIK)", f.ecx1, f.ebx7, f.ecx7, f.edx7, (unsigned long long)f.xcr0);
}

static PyObject *py_decide_isas(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ecx1", "ebx7", "ecx7", "edx7", "xcr0", "amx_permit_error", NULL};
    xe_cpu_facts f;
    unsigned long long xcr0;
    const char *error = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "IIIIK|z", kwlist, &f.ecx1, &f.ebx7, &f.ecx7,
                                     &f.edx7, &xcr0, &error))
        return NULL;
    f.xcr0 = xcr0;
    xe_isa_table t;
    xe_decide_isas(&f, error, &t);
    return isa_dict(&t);
}

/* ------------------------------------------------------------------ correlate */

/* The out argument: [C, S(S+1)/2, 2] int32 as bytes. */
static int check_out(const Py_buffer *ob, int S, int C)
{
    const size_t out_bytes = (size_t)C * ((size_t)S * (S + 1) / 2) * 2 * sizeof(int32_t);
    if ((size_t)ob->len == out_bytes)
        return 0;
    PyErr_Format(PyExc_ValueError, "out holds %zd bytes; expected %zu ([C, nbaseline, 2] int32)",
                 ob->len, out_bytes);
    return -1;
}

/* The optional extremes argument: S writable int64 counts, added to (call->extremes). */
static int check_extremes(const Py_buffer *eb, int S, xe_call *call)
{
    call->extremes = NULL;
    if (!eb->obj)
        return 0;
    if (kind_of(eb) != 'i' || eb->itemsize != 8 || eb->len != 8L * S) {
        PyErr_Format(PyExc_ValueError, "extremes must be %d int64 values (one per stream)", S);
        return -1;
    }
    call->extremes = eb->buf;
    return 0;
}

/* Run a call whose planning returned `planned` (0, or -1 with err) without the GIL, from
 * b[0] into b[1]; the threads' CPU seconds, or NULL with the exception. */
static PyObject *run(int planned, xe_plan *plan, const xe_call *call, Py_buffer *b,
                     xe_error *err)
{
    double cpu = 0;
    int rc = planned;
    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = xe_run(plan, call, b[0].buf, b[1].buf, &cpu, err);
        Py_END_ALLOW_THREADS
    }
    return rc == 0 ? PyFloat_FromDouble(cpu) : set_error(err);
}

PyDoc_STRVAR(correlate_doc,
"correlate(frames, out, nstream, nchan, ncoarse, isa, nthreads, kt=0, mode='full',\n"
"          sample_bits=8, nibble_order='re_high', accumulate=False, stream_offsets=None,\n"
"          frame_bytes=0, nframe=0)\n\n"
"Correlate whole frames (C-contiguous buffer) into the packed triangle out\n"
"[C, S(S+1)/2, 2] int32 (overwritten, or added to modulo 2^32 with accumulate).\n"
"sample_bits=8: int8 frames [P, S, C, ncoarse, 2, 8]; sample_bits=4: ci4 frames\n"
"[P, S, C, ncoarse, 8] bytes, one complex sample per byte as two two's-complement nibbles,\n"
"re in the high nibble ('re_high') or the low one ('re_low'), unpacked inside the layout\n"
"pass. isa is one of isa_status()'s names. kt: K-steps of 64 spectra per chunk (0:\n"
"default). mode: 'full'; 'layout' runs only the frame-to-tile conversion and leaves out\n"
"untouched; 'compute' converts only each thread's first chunk (a wrong result) so the\n"
"kernels can be timed alone. stream_offsets (int64, one per stream): the streams lie\n"
"anywhere, each its [C, ncoarse, ...] bytes at its offset in each of nframe packet times\n"
"frame_bytes apart (our packets in place: a pcap file's records). extremes (int64 [S],\n"
"writable): each stream's sample parts at the quantiser's extremes (-128/+127, ci4 -8/+7)\n"
"are added to it, counted in the tiles the layout pass builds. Releases the GIL.\n"
"Returns the CPU seconds its threads used (their sum), which time slicing on a shared\n"
"machine does not inflate.");

static PyObject *py_correlate(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"frames", "out", "nstream", "nchan", "ncoarse", "isa", "nthreads",
                             "kt", "mode", "sample_bits", "nibble_order", "accumulate",
                             "stream_offsets", "frame_bytes", "nframe", "extremes", NULL};
    Py_buffer b[4] = {{0}};  /* frames, out, stream_offsets, extremes */
    choice mode = {"mode", MODES, 0}, nib = {"nibble_order", NIBBLE_ORDERS, 0};
    xe_call call = {.bits = 8};
    int S, C, ncoarse;
    long long frame_bytes = 0;
    long nframe = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&iiiO&i|iO&iO&pO&LlO&", kwlist, buf_in,
                                     &b[0], buf_out, &b[1], &S, &C, &ncoarse, runnable_isa,
                                     &call.isa, &call.nthreads, &call.kt, choose, &mode,
                                     &call.bits, choose, &nib, &call.accumulate, buf_opt, &b[2],
                                     &frame_bytes, &nframe, buf_out_opt, &b[3]))
        return NULL;
    call.mode = (enum xe_mode)mode.value;
    call.re_low = nib.value;
    PyObject *result = NULL;
    xe_plan plan;
    xe_error err = {0};
    if (call.bits != 8 && call.bits != 4)
        PyErr_Format(PyExc_ValueError, "sample_bits must be 8 or 4, got %d", call.bits);
    else if (b[2].obj && (kind_of(&b[2]) != 'i' || b[2].itemsize != 8 || b[2].len != 8L * S))
        PyErr_Format(PyExc_ValueError, "stream_offsets must be %d int64 values", S);
    else if (check_extremes(&b[3], S, &call) == 0 && check_out(&b[1], S, C) == 0)
        result = run(xe_plan_frames(&plan, &call, S, C, ncoarse, (size_t)b[0].len, b[2].buf,
                                    nframe, frame_bytes, &err), &plan, &call, b, &err);
    release(b, 4);
    return result;
}

PyDoc_STRVAR(correlate_layout_doc,
"correlate_layout(data, out, stream_offsets, nchan, nframe, frame_spectra, frame_bytes,\n"
"                 chan_stride, time_stride, time_block, block_stride, encoding, im_offset,\n"
"                 nibble_order, isa, nthreads, kt=0, mode='full', accumulate=False,\n"
"                 extremes=None)\n\n"
"Correlate nframe frames of data (a C-contiguous buffer) in any layout (SampleLayout's\n"
"fields: the byte of spectrum t of channel c of stream s is f*frame_bytes +\n"
"stream_offsets[s] + c*chan_stride + (t/time_block)*block_stride + (t%time_block)*\n"
"time_stride, t < frame_spectra, f < nframe; im_offset bytes on for the imaginary part)\n"
"into out as correlate() does. encoding: 'ci8', 'ci4' (nibble_order) or 'ci16' (int16\n"
"little endian, narrowed to int8: a value outside -128..127 raises ValueError naming it).\n"
"stream_offsets: int64 array, one per stream (S even). Read in one pass into the tiles\n"
"(layout.c), AVX2 transposes where streams lie side by side. extremes as correlate()'s.\n"
"Releases the GIL; returns the threads' CPU seconds.");

static PyObject *py_correlate_layout(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "out", "stream_offsets", "nchan", "nframe",
                             "frame_spectra", "frame_bytes", "chan_stride", "time_stride",
                             "time_block", "block_stride", "encoding", "im_offset",
                             "nibble_order", "isa", "nthreads", "kt", "mode", "accumulate",
                             "extremes", NULL};
    Py_buffer b[4] = {{0}};  /* data, out, stream_offsets, extremes */
    choice mode = {"mode", MODES, 0}, enc = {"encoding", ENCODINGS, 0},
           nib = {"nibble_order", NIBBLE_ORDERS, 0};
    xe_call call = {0};
    xe_layout lay = {0};
    int C;
    long nframe;
    long long fb, cs, ts, bs;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&O&illLLLlLO&iO&O&i|iO&pO&", kwlist,
                                     buf_in, &b[0], buf_out, &b[1], buf_in, &b[2], &C, &nframe,
                                     &lay.frame_spectra, &fb, &cs, &ts, &lay.time_block, &bs,
                                     choose, &enc, &lay.im_offset, choose, &nib, runnable_isa,
                                     &call.isa, &call.nthreads, &call.kt, choose, &mode,
                                     &call.accumulate, buf_out_opt, &b[3]))
        return NULL;
    lay.frame_bytes = fb, lay.chan_stride = cs, lay.time_stride = ts, lay.block_stride = bs;
    lay.enc = enc.value;
    lay.re_low = call.re_low = nib.value;
    call.bits = enc.value == XE_CI4 ? 4 : 8;
    call.mode = (enum xe_mode)mode.value;
    const buffer_spec offsets = {"stream_offsets", 'i', 8, 1, {-1}};
    PyObject *result = NULL;
    const int S = (int)(b[2].len / 8);
    xe_plan plan;
    xe_error err = {0};
    lay.stream_off = b[2].buf;
    if (check_buffer(&b[2], &offsets) == 0 && check_extremes(&b[3], S, &call) == 0
        && check_out(&b[1], S, C) == 0)
        result = run(xe_plan_layout(&plan, &lay, &call, S, C, nframe, (size_t)b[0].len, &err),
                     &plan, &call, b, &err);
    release(b, 4);
    return result;
}

/* ------------------------------------------------------------------ int8 peak loops */

PyDoc_STRVAR(int8_peak_doc,
"int8_peak(isa, nthreads, iters) -> (int8 ops/s, instruction, int8 ops per CPU second)\n\n"
"Register-resident loop of the instruction the native path `isa` multiplies with (amx:\n"
"tdpbssd; avx512vnni: vpdpbusd; avx2: vpmaddwd), iters iterations on each of nthreads threads\n"
"at once, operands loaded once: the ceiling of that path on this machine, measured now.\n"
"Ops are int8 MACs x 2; ops/s over the slowest thread's wall time, and per CPU second of\n"
"all threads (insensitive to time slicing). amx_emulated runs the AMX loop's source on the\n"
"emulated tiles (a check of that code, not a peak). Raises RuntimeError where the path cannot\n"
"run.");

static PyObject *py_int8_peak(PyObject *self, PyObject *args)
{
    int isa, nthreads;
    long iters;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&il", runnable_isa, &isa, &nthreads, &iters))
        return NULL;
    double wall = 0, cpu = 0;
    const char *what = "";
    xe_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = xe_int8_peak(isa, nthreads, iters, &wall, &what, &cpu, &err);
    Py_END_ALLOW_THREADS
    return rc == 0 ? Py_BuildValue("(dsd)", wall, what, cpu) : set_error(&err);
}

/* ------------------------------------------------------------------ AMX emulation test hook */

PyDoc_STRVAR(amx_emu_tdpbssd_doc,
"_amx_emu_tdpbssd(config, dst, src1, src2, c, a, b, load_config=True)\n\n"
"Test hook of the AMX emulation (amx_emu.h) alone: load the 64-byte tile configuration\n"
"`config` (unless load_config is false), load tiles dst, src1, src2 from the 1024-byte\n"
"buffers c (int32), a, b (int8; rows 64 bytes apart, as much as each tile's configured\n"
"rows x colsb), run TDPBSSD dst, src1, src2, store dst back into c and release the tiles.\n"
"Raises RuntimeError with the emulated #GP/#UD where the hardware would fault.");

static PyObject *py_amx_emu_tdpbssd(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"config", "dst", "src1", "src2", "c", "a", "b", "load_config",
                             NULL};
    Py_buffer b[4] = {{0}};  /* config, c, a, b */
    int dst, src1, src2, load_config = 1;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&iiiO&O&O&|p", kwlist, buf_in, &b[0], &dst,
                                     &src1, &src2, buf_out, &b[1], buf_in, &b[2], buf_in, &b[3],
                                     &load_config))
        return NULL;
    PyObject *result = NULL;
#ifdef XE_HAVE_AMX_EMU
    char fault[200];
    if (b[0].len != 64 || b[1].len != XE_TILE_BYTES || b[2].len != XE_TILE_BYTES
            || b[3].len != XE_TILE_BYTES)
        PyErr_Format(PyExc_ValueError, "config must be 64 bytes and c, a, b contiguous "
                     "1024-byte tiles (got %zd, %zd, %zd, %zd bytes)", b[0].len, b[1].len,
                     b[2].len, b[3].len);
    else if (xe_amx_emu_tdpbssd_test(b[0].buf, load_config, dst, src1, src2, b[1].buf, b[2].buf,
                                     b[3].buf, fault, sizeof fault))
        PyErr_SetString(PyExc_RuntimeError, fault);
    else
        result = Py_NewRef(Py_None);
#else
    (void)dst, (void)src1, (void)src2, (void)load_config;
    PyErr_SetString(PyExc_RuntimeError, "the AMX emulation was not compiled in (it is built "
                    "with the AVX-512 layout code, which the compiler lacked)");
#endif
    release(b, 4);
    return result;
}

/* ------------------------------------------------------------------ host passes */

PyDoc_STRVAR(gather_doc,
"gather(src, rs, soff, scs, sim, encoding, nibble_order, dst, rd, doff, dcs, dim, nchan,\n"
"       out_nibble_order=None)\n"
"  -> None or the first value that does not fit the output\n\n"
"The SampleLayout gather: for channels c < nchan, streams s < len(soff) and spectra\n"
"d < len(rs), the sample at byte rs[d] + soff[s] + c*scs of src (imaginary part sim bytes\n"
"on; 'ci8', 'ci4' in nibble_order, or 'ci16' little endian narrowed to int8) to element\n"
"rd[d] + doff[s] + c*dcs of dst (imaginary part dim elements on; int8, int16, int32,\n"
"float32 or float64; with out_nibble_order ('re_high' or 're_low'), one packed ci4 byte\n"
"per sample of an int8 dst, dim unused, ci8/ci16 values checked to fit -8..7).\n"
"rs, soff, rd, doff: int64 arrays (len(rd) == len(rs),\n"
"len(doff) == len(soff)). The caller bounds every index (sample_layout.gather does).\n"
"Releases the GIL.");

static PyObject *py_gather(PyObject *self, PyObject *args)
{
    Py_buffer b[6] = {{0}};  /* src, rs, soff, dst, rd, doff */
    choice enc = {"encoding", ENCODINGS, 0}, nib = {"nibble_order", NIBBLE_ORDERS, 0};
    choice out_nib = {"out_nibble_order", NIBBLE_ORDERS, -1};
    PyObject *out_nib_arg = Py_None;
    long long scs, sim, dcs, dim;
    int nchan;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&O&O&LLO&O&O&O&O&LLi|O", buf_in, &b[0], buf_in, &b[1],
                          buf_in, &b[2], &scs, &sim, choose, &enc, choose, &nib, buf_out, &b[3],
                          buf_in, &b[4], buf_in, &b[5], &dcs, &dim, &nchan, &out_nib_arg))
        return NULL;
    if (out_nib_arg != Py_None && !choose(out_nib_arg, &out_nib)) {
        release(b, 6);
        return NULL;
    }
    const Py_ssize_t nspec = b[1].len / 8, nstream = b[2].len / 8;
    const buffer_spec specs[] = {
        {"rs", 'i', 8, 1, {-1}}, {"soff", 'i', 8, 1, {-1}},
        {"rd", 'i', 8, 1, {nspec}}, {"doff", 'i', 8, 1, {nstream}},
    };
    static const struct { char kind; int size; } types[XE_NOUT] = {
        [XE_OUT_I8] = {'i', 1}, [XE_OUT_I16] = {'i', 2}, [XE_OUT_I32] = {'i', 4},
        [XE_OUT_F32] = {'f', 4}, [XE_OUT_F64] = {'f', 8},
    };
    int out_type = -1;
    for (int i = 0; i < XE_NOUT; i++)
        if (kind_of(&b[3]) == types[i].kind && b[3].itemsize == types[i].size)
            out_type = i;
    PyObject *result = NULL;
    if (check_buffer(&b[1], &specs[0]) || check_buffer(&b[2], &specs[1])
            || check_buffer(&b[4], &specs[2]) || check_buffer(&b[5], &specs[3]))
        ;
    else if (out_type < 0)
        PyErr_Format(PyExc_ValueError, "dst must be int8, int16, int32, float32 or float64 "
                     "(got format %s)", b[3].format ? b[3].format : "B");
    else if (out_nib.value >= 0 && out_type != XE_OUT_I8)
        PyErr_SetString(PyExc_ValueError, "packed ci4 out (out_nibble_order) needs an int8 dst");
    else {
        if (out_nib.value >= 0)
            out_type = XE_OUT_CI4_RE_HIGH + out_nib.value;
        int bad = 0, nbad;
        Py_BEGIN_ALLOW_THREADS
        nbad = xe_gather(b[0].buf, b[1].buf, (long)nspec, b[2].buf, (int)nstream, scs, sim,
                         enc.value, nib.value, b[3].buf, out_type, b[4].buf, b[5].buf, dcs, dim,
                         nchan, &bad);
        Py_END_ALLOW_THREADS
        result = nbad ? PyLong_FromLong(bad) : Py_NewRef(Py_None);
    }
    release(b, 6);
    return result;
}

static PyObject *py_unpack_ci4_rows(PyObject *self, PyObject *args)
{
    Py_buffer b[2] = {{0}};  /* src, out */
    choice nib = {"nibble_order", NIBBLE_ORDERS, 0};
    (void)self;
    if (!PyArg_ParseTuple(args, "O&O&O&", buf_in, &b[0], buf_out, &b[1], choose, &nib))
        return NULL;
    PyObject *result = NULL;
    if (b[0].len % 8 || b[1].len != 2 * b[0].len)
        PyErr_Format(PyExc_ValueError, "ci4 rows: %zd bytes in (a multiple of 8) need twice as "
                     "many out, got %zd", b[0].len, b[1].len);
    else {
        Py_BEGIN_ALLOW_THREADS
        xe_unpack_ci4_rows(b[0].buf, (long)(b[0].len / 8), nib.value == 0, b[1].buf);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(b, 2);
    return result;
}

/* The position of the first int64 of b outside [0, bound), or -1 where there is none. */
static Py_ssize_t first_outside(const Py_buffer *b, Py_ssize_t bound)
{
    const int64_t *v = b->buf;
    for (Py_ssize_t i = 0; i < b->len / 8; i++)
        if (v[i] < 0 || v[i] >= bound)
            return i;
    return -1;
}

static PyObject *py_place_pair(PyObject *self, PyObject *args)
{
    Py_buffer b[5] = {{0}};  /* out, re_pos, im_pos, dst, tri */
    (void)self;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&", buf_in, &b[0], buf_in, &b[1], buf_in, &b[2],
                          buf_in, &b[3], buf_out, &b[4]))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = b[3].len / 8;
    const Py_ssize_t nchan = b[4].ndim == 3 ? b[4].shape[0] : 0;
    const Py_ssize_t nbl = b[4].ndim == 3 ? b[4].shape[1] : 0;
    const Py_ssize_t per_chan = nchan ? b[0].len / 4 / nchan : 0;
    if (b[0].itemsize != 4 || b[4].itemsize != 4 || b[1].itemsize != 8 || b[2].itemsize != 8
            || b[3].itemsize != 8 || b[1].len != b[3].len || b[2].len != b[3].len
            || b[4].ndim != 3 || b[4].shape[2] != 2 || !nchan
            || b[0].len != 4 * per_chan * nchan)  /* C-contiguous: buf_in and buf_out ask so */
        PyErr_SetString(PyExc_ValueError, "place_pair(out, re_pos, im_pos, dst, tri): out "
                        "int32 of nchan equal rows, positions and dst int64 of one length, tri "
                        "C-contiguous int32 [nchan, nbl, 2]");
    else if (first_outside(&b[1], per_chan) >= 0 || first_outside(&b[2], per_chan) >= 0
             || first_outside(&b[3], nbl) >= 0)
        PyErr_SetString(PyExc_ValueError, "place_pair: a position outside a channel's output or "
                        "a baseline outside the triangle");
    else {
        Py_BEGIN_ALLOW_THREADS
        xe_place_pair(b[0].buf, (long)per_chan, (long)nchan, b[1].buf, b[2].buf, b[3].buf,
                      (long)n, b[4].buf, (long)nbl);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(b, 5);
    return result;
}

/* The enum xe_num_type of a buffer (int32, int64, float64), or -1. */
static int num_type(const Py_buffer *b)
{
    const char k = kind_of(b);
    return k == 'i' && b->itemsize == 4 ? XE_I32 : k == 'i' && b->itemsize == 8 ? XE_I64
        : k == 'f' && b->itemsize == 8 ? XE_F64 : -1;
}

/* index [nbls, npol] int64 within nbl baselines: 0, or -1 with ValueError. */
static int check_index(const Py_buffer *ix, Py_ssize_t nbl)
{
    const buffer_spec spec = {"index", 'i', 8, 2, {-1, -1}};
    if (check_buffer(ix, &spec) != 0)
        return -1;
    const Py_ssize_t i = first_outside(ix, nbl);
    if (i >= 0) {
        PyErr_Format(PyExc_ValueError, "index[%zd] = %lld is outside the triangle's %zd "
                     "baselines", i, (long long)((const int64_t *)ix->buf)[i], nbl);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(uvh5_rows_doc,
"uvh5_rows(tri, index, flip, vis[, order]): vis[b, c, p] = tri[c, index[b, p]], the imaginary\n"
"part negated where flip[b, p] (tri [C, nbaseline, 2] int32, int64 or float64; index int64 and\n"
"flip uint8 [nbls, npol]; vis [nbls, C, npol, 2] int32 (from integer tri) or float64): the\n"
"UVH5 writer's row pass, rows made in the order of order (int64 [nbls], a permutation of the\n"
"rows; the same values in any order; None or absent: file order). Releases the GIL.");

static PyObject *py_uvh5_rows(PyObject *self, PyObject *args)
{
    Py_buffer b[5] = {{0}};  /* tri, index, flip, vis, order */
    (void)self;
    if (!PyArg_ParseTuple(args, "O&O&O&O&|O&", buf_in, &b[0], buf_in, &b[1], buf_in, &b[2],
                          buf_out, &b[3], buf_opt, &b[4]))
        return NULL;
    PyObject *result = NULL;
    const int tt = num_type(&b[0]), vt = num_type(&b[3]);
    const Py_ssize_t C = b[0].ndim == 3 ? b[0].shape[0] : 0, nbl = C ? b[0].shape[1] : 0;
    const Py_ssize_t nbls = b[1].ndim == 2 ? b[1].shape[0] : 0, P = nbls ? b[1].shape[1] : 0;
    const buffer_spec flip = {"flip", 'u', 1, 2, {nbls, P}};
    const buffer_spec vis = {"vis", 0, 0, 4, {nbls, C, P, 2}};
    const buffer_spec order = {"order", 'i', 8, 1, {nbls}};
    if (b[0].ndim != 3 || b[0].shape[2] != 2 || tt < 0)
        PyErr_SetString(PyExc_ValueError, "tri must be int32, int64 or float64 [C, nbaseline, 2]");
    else if (check_index(&b[1], nbl) || check_buffer(&b[2], &flip) || check_buffer(&b[3], &vis)
             || (b[4].obj && check_buffer(&b[4], &order)))
        ;
    else if (!(vt == XE_F64 || (vt == XE_I32 && tt != XE_F64)))
        PyErr_SetString(PyExc_ValueError, "vis must be int32 (from an integer tri) or float64");
    else if (b[4].obj && first_outside(&b[4], nbls) >= 0)
        PyErr_Format(PyExc_ValueError, "order: a row outside the %zd rows", nbls);
    else {
        Py_BEGIN_ALLOW_THREADS
        xe_uvh5_rows(b[0].buf, tt, C, nbl, b[1].buf, b[2].buf, b[4].obj ? b[4].buf : NULL, nbls,
                     P, b[3].buf, vt);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(b, 5);
    return result;
}

PyDoc_STRVAR(uvh5_counts_doc,
"uvh5_counts(valid, index, nspectra, flags, nsamples): for each row b, channel c and\n"
"polarisation p, n = valid[c (or 0 with one row of counts), index[b, p]] spectra:\n"
"flags[b, c, p] = n == 0, nsamples[b, c, p] = n / nspectra (float32). valid int64\n"
"[C or 1, nbaseline]; index int64 [nbls, npol]; flags bool/uint8 and nsamples float32\n"
"[nbls, C, npol]. The UVH5 writer's counts. Releases the GIL.");

static PyObject *py_uvh5_counts(PyObject *self, PyObject *args)
{
    Py_buffer b[4] = {{0}};  /* valid, index, flags, nsamples */
    double nspectra;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&O&dO&O&", buf_in, &b[0], buf_in, &b[1], &nspectra, buf_out,
                          &b[2], buf_out, &b[3]))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t nbl = b[0].ndim == 2 ? b[0].shape[1] : 0;
    const Py_ssize_t C = b[2].ndim == 3 ? b[2].shape[1] : 0;
    const Py_ssize_t nbls = b[1].ndim == 2 ? b[1].shape[0] : 0, P = nbls ? b[1].shape[1] : 0;
    const buffer_spec valid = {"valid", 'i', 8, 2, {-1, -1}};
    const buffer_spec flags = {"flags", 'u', 1, 3, {nbls, -1, P}};
    const buffer_spec nsamples = {"nsamples", 'f', 4, 3, {nbls, C, P}};
    if (check_buffer(&b[0], &valid) || check_index(&b[1], nbl) || check_buffer(&b[2], &flags)
            || check_buffer(&b[3], &nsamples))
        ;
    else if (b[0].shape[0] != 1 && b[0].shape[0] != C)
        PyErr_Format(PyExc_ValueError, "valid has %zd rows of counts for %zd channels",
                     b[0].shape[0], C);
    else {
        Py_BEGIN_ALLOW_THREADS
        xe_uvh5_counts(b[0].buf, b[0].shape[0] > 1, C, nbl, b[1].buf, nbls, P, nspectra,
                       b[2].buf, b[3].buf);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    release(b, 4);
    return result;
}

/* ------------------------------------------------------------------ the module */

#define KW(f) (PyCFunction)(void (*)(void))(f), METH_VARARGS | METH_KEYWORDS

static PyMethodDef methods[] = {
    {"isa_status", py_isa_status, METH_NOARGS,
     "isa_status() -> {name: (runnable, reason, refused)} for every name in ISA_NAMES;\n"
     "refused: the CPU has the path but the OS or the kernel withholds its state."},
    {"correlate", KW(py_correlate), correlate_doc},
    {"correlate_layout", KW(py_correlate_layout), correlate_layout_doc},
    {"int8_peak", py_int8_peak, METH_VARARGS, int8_peak_doc},
    {"gather", py_gather, METH_VARARGS, gather_doc},
    {"unpack_ci4_rows", py_unpack_ci4_rows, METH_VARARGS,
     "unpack_ci4_rows(src, out, nibble_order): ci4 rows of 8 bytes (one complex sample each)\n"
     "-> out rows of 16 int8: the 8 real parts, then the 8 imaginary parts (re in the high\n"
     "nibble for 're_high', the low one for 're_low'). Releases the GIL."},
    {"place_pair", py_place_pair, METH_VARARGS,
     "place_pair(out, re_pos, im_pos, dst, tri): one NPU call's output (int32, nchan rows) into\n"
     "the packed triangle tri [nchan, nbl, 2]: tri[c, dst[k]] = (out[c, re_pos[k]],\n"
     "out[c, im_pos[k]]) for every channel c and k. Checks every index; releases the GIL."},
    {"uvh5_rows", py_uvh5_rows, METH_VARARGS, uvh5_rows_doc},
    {"uvh5_counts", py_uvh5_counts, METH_VARARGS, uvh5_counts_doc},
    {"_decide_isas", KW(py_decide_isas),
     "_decide_isas(ecx1, ebx7, ecx7, edx7, xcr0, amx_permit_error=None)\n\n"
     "Test hook: what isa_status() would say on a CPU with these CPUID words (leaf 1 ECX, leaf 7\n"
     "EBX/ECX/EDX) and this XCR0, of the paths compiled into this build; the kernel's AMX\n"
     "permission is granted, or refused with amx_permit_error. Nothing is detected or changed."},
    {"_cpu_facts", py_cpu_facts, METH_NOARGS,
     "_cpu_facts() -> (ecx1, ebx7, ecx7, edx7, xcr0) as the detection reads them (None off "
     "x86-64): the test of _decide_isas against this machine."},
    {"_amx_emu_tdpbssd", KW(py_amx_emu_tdpbssd), amx_emu_tdpbssd_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native",
    "Exact complex-int8 correlator kernels (AMX-INT8, AVX-512 VNNI, AVX2, C) and the package's "
    "host passes over samples; see kernels/cpu/.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    PyObject *names = PyTuple_New(XE_NISA);
    for (int i = 0; names && i < XE_NISA; i++) {
        PyObject *name = PyUnicode_FromString(xe_isa_names[i]);
        if (!name) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (!names || PyModule_AddObject(m, "ISA_NAMES", names) != 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "DEFAULT_KT", XE_DEFAULT_KT) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
