/* The UVH5 writer's row pass (xengine_block/outputs/uvh5.py, DumpRows): a dump's packed
 * triangle tri[C][nbaseline][2] (int32 or int64) gathered into visdata rows
 * vis[nbls][C][P][2] (int32), vis[b][c][p] = tri[c][index[b][p]], its imaginary part
 * negated where flip[b][p]. A copy and a negation: exact for every value the writer stores
 * as int32 (its bound keeps |x| < 2^31). Plain C on purpose: the gather defeats SIMD; the
 * loop order (rows written in order, each reading two rows of the triangle per channel) and
 * restrict pointers (the extension is built with -fno-strict-aliasing, which reloaded the
 * indices after every store) make it ~1.3x numba's pass. Releases the GIL. */
#include <Python.h>
#include <stdint.h>

/* vis rows from tri of element type T; NPOL the polarisations per row (P, or the constant 4
 * of every UVH5 file we write, which lets the compiler unroll the inner loop). The negation is
 * branchless: (x ^ m) - m with m = 0 or -1. Each variant a function of its own (noinline),
 * so that one loop's registers are not spilled for another's. */
#define ROWS_FN(NAME, T, NPOL_ARG, NPOL)                                                    \
    static __attribute__((noinline)) void NAME(                                              \
        const T *restrict tri, int64_t C, int64_t nbl, const int64_t *restrict index,        \
        const uint8_t *restrict flip, int64_t nbls, int64_t NPOL_ARG, int32_t *restrict vis) \
    {                                                                                        \
        (void)NPOL_ARG;                                                                      \
        for (int64_t b = 0; b < nbls; b++) {                                                 \
            const int64_t *restrict k = index + b * (NPOL);                                  \
            const uint8_t *restrict f = flip + b * (NPOL);                                   \
            int32_t *restrict o = vis + b * C * (NPOL) * 2;                                  \
            for (int64_t c = 0; c < C; c++, o += 2 * (NPOL)) {                              \
                const T *restrict t = tri + c * nbl * 2;                                     \
                for (int64_t p = 0; p < (NPOL); p++) {                                       \
                    const int32_t m = -(int32_t)f[p];                                        \
                    o[2 * p] = (int32_t)t[2 * k[p]];                                         \
                    o[2 * p + 1] = ((int32_t)t[2 * k[p] + 1] ^ m) - m;                       \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

ROWS_FN(rows_i32_p4, int32_t, npol, 4)
ROWS_FN(rows_i32, int32_t, npol, npol)
ROWS_FN(rows_i64_p4, int64_t, npol, 4)
ROWS_FN(rows_i64, int64_t, npol, npol)

static void rows(const void *tri, int wide, int64_t C, int64_t nbl, const int64_t *index,
                 const uint8_t *flip, int64_t nbls, int64_t P, int32_t *vis)
{
    if (wide)
        (P == 4 ? rows_i64_p4 : rows_i64)(tri, C, nbl, index, flip, nbls, P, vis);
    else
        (P == 4 ? rows_i32_p4 : rows_i32)(tri, C, nbl, index, flip, nbls, P, vis);
}

/* A signed integer buffer of itemsize 4 or 8 (numpy's int32 'i', int64 'l' or 'q'). */
static int signed_int(const Py_buffer *v, int itemsize)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    return v->itemsize == itemsize && f[1] == '\0' && (f[0] == 'i' || f[0] == 'l' || f[0] == 'q');
}

PyObject *xe_py_uvh5_rows(PyObject *self, PyObject *args)
{
    PyObject *tobj, *iobj, *fobj, *vobj;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO", &tobj, &iobj, &fobj, &vobj))
        return NULL;
    Py_buffer t, ix, fl, vis;
    const int ro = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(tobj, &t, ro) != 0)
        return NULL;
    if (PyObject_GetBuffer(iobj, &ix, ro) != 0) {
        PyBuffer_Release(&t);
        return NULL;
    }
    if (PyObject_GetBuffer(fobj, &fl, ro) != 0) {
        PyBuffer_Release(&t);
        PyBuffer_Release(&ix);
        return NULL;
    }
    if (PyObject_GetBuffer(vobj, &vis, ro | PyBUF_WRITABLE) != 0) {
        PyBuffer_Release(&t);
        PyBuffer_Release(&ix);
        PyBuffer_Release(&fl);
        return NULL;
    }
    PyObject *ret = NULL;
    const int wide = t.itemsize == 8;
    if (t.ndim != 3 || t.shape[2] != 2 || !(signed_int(&t, 4) || signed_int(&t, 8))) {
        PyErr_SetString(PyExc_ValueError, "tri must be int32 or int64 [C, nbaseline, 2]");
        goto done;
    }
    const int64_t C = t.shape[0], nbl = t.shape[1];
    if (ix.ndim != 2 || !signed_int(&ix, 8)) {
        PyErr_SetString(PyExc_ValueError, "index must be int64 [nbls, npol]");
        goto done;
    }
    const int64_t nbls = ix.shape[0], P = ix.shape[1];
    if (fl.ndim != 2 || fl.itemsize != 1 || fl.shape[0] != nbls || fl.shape[1] != P) {
        PyErr_Format(PyExc_ValueError, "flip must be uint8 [%lld, %lld]", (long long)nbls,
                     (long long)P);
        goto done;
    }
    if (vis.ndim != 4 || !signed_int(&vis, 4) || vis.shape[0] != nbls || vis.shape[1] != C
            || vis.shape[2] != P || vis.shape[3] != 2) {
        PyErr_Format(PyExc_ValueError, "vis must be int32 [%lld, %lld, %lld, 2]",
                     (long long)nbls, (long long)C, (long long)P);
        goto done;
    }
    const int64_t *index = ix.buf;
    for (int64_t i = 0; i < nbls * P; i++) {
        if (index[i] < 0 || index[i] >= nbl) {
            PyErr_Format(PyExc_ValueError, "index[%lld] = %lld is outside the triangle's %lld "
                         "baselines", (long long)i, (long long)index[i], (long long)nbl);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    rows(t.buf, wide, C, nbl, index, fl.buf, nbls, P, vis.buf);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    ret = Py_None;
done:
    PyBuffer_Release(&t);
    PyBuffer_Release(&ix);
    PyBuffer_Release(&fl);
    PyBuffer_Release(&vis);
    return ret;
}
