/* One command line's arguments to a value: the readers of grammar.py's argument kinds, as
 * lines.py's regex fragments read them (left to right, no backtracking). */

/* u32 / u64 / timeout: spaces, then one or more ASCII digits; > top is a failure. */
static int
read_digits(const char *s, Py_ssize_t n, Py_ssize_t *p, unsigned long long top,
            unsigned long long *out)
{
    Py_ssize_t i = *p;
    while (i < n && s[i] == ' ')
        i++;
    Py_ssize_t start = i;
    unsigned long long v = 0;
    int over = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (top - d) / 10)
            over = 1;
        else
            v = v * 10 + d;
        i++;
    }
    *p = i;
    if (i == start || over)
        return -1;
    *out = v;
    return 0;
}

static int
is_cspace(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/* count: strtoul (C spaces, a sign, digits; minus wraps mod 2**64), truncated to 32 bits. */
static int
read_count(const char *s, Py_ssize_t n, Py_ssize_t *p, unsigned long long *out)
{
    Py_ssize_t i = *p;
    while (i < n && is_cspace(s[i]))
        i++;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    unsigned long long v;
    Py_ssize_t q = i;
    if (i < n && s[i] == ' ')  /* no spaces between the sign and the digits */
        return -1;
    if (read_digits(s, n, &q, ~0ULL, &v) < 0)
        return -1;
    *p = q;
    if (neg)
        v = (~v) + 1;
    *out = v & 0xFFFFFFFFULL;
    return 0;
}

static int
valid_tube(const char *s, Py_ssize_t n)
{
    if (n < 1 || n > 200 || s[0] == '-')
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!name_chars[(unsigned char)s[i]])
            return 0;
    return 1;
}

/* One command line's arguments (the text after the prefix) to a value, or BAD_FORMAT. */
static PyObject *
parse_args(Spec *sp, const char *s, Py_ssize_t n)
{
    PyObject *vals[MAX_ARGS];
    int nv = 0;
    Py_ssize_t p = 0;
    PyObject *result = NULL;
    for (int k = 0; k < sp->nargs; k++) {
        char kind = sp->kinds[k];
        unsigned long long v;
        PyObject *o;
        if (kind == 'T') { /* the whole rest of the line */
            if (!valid_tube(s + p, n - p))
                goto bad;
            o = PyUnicode_DecodeASCII(s + p, n - p, NULL);
            p = n;
        } else if (kind == 'n') {
            while (p < n && s[p] == ' ')
                p++;
            Py_ssize_t start = p;
            while (p < n && name_chars[(unsigned char)s[p]])
                p++;
            if (p == start || !valid_tube(s + start, p - start))
                goto bad;
            o = PyUnicode_DecodeASCII(s + start, p - start, NULL);
        } else if (kind == 'c') {
            if (read_count(s, n, &p, &v) < 0)
                goto bad;
            o = PyLong_FromUnsignedLongLong(v);
        } else {
            unsigned long long top = kind == 'u' ? 0xFFFFFFFFULL
                                   : kind == 't' ? 0x7FFFFFFFULL : ~0ULL;
            if (read_digits(s, n, &p, top, &v) < 0)
                goto bad;
            o = PyLong_FromUnsignedLongLong(v);
        }
        if (o == NULL)
            goto done;
        vals[nv++] = o;
    }
    {
        char last = sp->kinds[sp->nargs - 1];
        /* timeout and count are read with an end pointer nobody checks */
        if (p != n && last != 't' && last != 'c')
            goto bad;
    }
    result = PyObject_Vectorcall(sp->build, vals, (size_t)nv, NULL);
    goto done;
bad:
    Py_INCREF(BAD_FORMAT);
    result = BAD_FORMAT;
done:
    for (int i = 0; i < nv; i++)
        Py_DECREF(vals[i]);
    return result;
}
