/* Shared by the pieces of _speedups.c: limits, framing states and the command table as the
 * module holds it. A command value is built by calling its class (commands.py; compiled, an
 * extension type whose vectorcall is one C call): the parser never fills an object's fields.
 * Included once, by _speedups.c. */

#define LINE_MAX_ 224
#define MAX_ARGS 8

enum { ST_LINE = 0, ST_ENDLINE = 1, ST_BODY = 2, ST_SKIP = 3 };
enum { F_EXACT = 1, F_LOOSE = 2, F_BODY = 4, F_PUT = 8 }; /* F_PUT: the body row that is put */

typedef struct {
    char *prefix;
    Py_ssize_t prefix_len;
    char kinds[MAX_ARGS];         /* u U t c T n: u32 u64 timeout count tube name */
    int nargs;
    int flags;
    PyObject *only;               /* the value of an argument-less command */
    PyObject *build;              /* else called with the values in argument order */
} Spec;

static Spec *specs = NULL;
static Py_ssize_t nspecs = 0;
static PyObject *put_build = NULL;  /* Put(pri, delay, ttr, body, error) */
static PyObject *NEED_DATA = NULL, *BAD_FORMAT = NULL, *UNKNOWN_COMMAND = NULL;
static PyObject *S_JOB_TOO_BIG = NULL, *S_EXPECTED_CRLF = NULL, *S_BAD_FORMAT = NULL;
static PyObject *EMPTY_BYTES = NULL;
static unsigned long long max_job_limit = 1ULL << 30;
static unsigned char name_chars[256];
