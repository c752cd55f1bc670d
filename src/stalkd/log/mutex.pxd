# The C types of mutex.py when Cython compiles it (an augmenting .pxd: mutex.py stays the one
# source). Mutex.acquire and .release are C calls for the modules that cimport it (writer.pxd,
# commit.pxd): an atomic try first, then a wait with the GIL released (the C below).

cimport cython

cdef extern from *:
    """
    #include <errno.h>
    #include <pthread.h>
    #include <time.h>
    /* locked: 1 while taken (changed by atomic compare-and-swap and store); waiters: takers
       sleeping on c (under m). A giver that sees no waiter after its store needs no wake-up: a
       taker counts itself (seq_cst) before its last try, so either the giver sees it, or its
       try sees the lock free. */
    typedef struct { int locked; int waiters; pthread_mutex_t m; pthread_cond_t c; } stalkd_mx_t;
    #if defined(__linux__)
    #define STALKD_MX_CLOCK CLOCK_MONOTONIC
    #else
    #define STALKD_MX_CLOCK CLOCK_REALTIME
    #endif
    static inline void *stalkd_mx_new(void) {
        stalkd_mx_t *x = (stalkd_mx_t *)PyMem_RawMalloc(sizeof(stalkd_mx_t));
        pthread_condattr_t a;
        if (x == NULL) return NULL;
        x->locked = 0;
        x->waiters = 0;
        if (pthread_mutex_init(&x->m, NULL) != 0 || pthread_condattr_init(&a) != 0) {
            PyMem_RawFree(x);
            return NULL;
        }
    #if defined(__linux__)
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    #endif
        if (pthread_cond_init(&x->c, &a) != 0) {
            pthread_condattr_destroy(&a);
            pthread_mutex_destroy(&x->m);
            PyMem_RawFree(x);
            return NULL;
        }
        pthread_condattr_destroy(&a);
        return x;
    }
    static inline void stalkd_mx_free(void *p) {
        stalkd_mx_t *x = (stalkd_mx_t *)p;
        pthread_cond_destroy(&x->c);
        pthread_mutex_destroy(&x->m);
        PyMem_RawFree(x);
    }
    static inline int stalkd_mx_try(stalkd_mx_t *x) {
        int free_ = 0;
        return __atomic_compare_exchange_n(&x->locked, &free_, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    /* 1 once taken, 0 if not within timeout seconds (< 0: no limit, 0: no wait). */
    static inline int stalkd_mx_take(void *p, double timeout) {
        stalkd_mx_t *x = (stalkd_mx_t *)p;
        struct timespec deadline;
        int got = 0;
        if (stalkd_mx_try(x)) return 1;
        if (timeout == 0) return 0;
        if (timeout > 0) {
            double whole;
            if (timeout > 4e12) timeout = 4e12;  /* ~127,000 years: no time_t overflow */
            whole = (double)(long long)timeout;
            clock_gettime(STALKD_MX_CLOCK, &deadline);
            deadline.tv_sec += (time_t)whole;
            deadline.tv_nsec += (long)((timeout - whole) * 1e9);
            if (deadline.tv_nsec >= 1000000000) {
                deadline.tv_sec += 1;
                deadline.tv_nsec -= 1000000000;
            }
        }
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&x->m);
        __atomic_add_fetch(&x->waiters, 1, __ATOMIC_SEQ_CST);
        for (;;) {
            if (stalkd_mx_try(x)) {
                got = 1;
                break;
            }
            if (timeout < 0) {
                pthread_cond_wait(&x->c, &x->m);
            } else if (pthread_cond_timedwait(&x->c, &x->m, &deadline) == ETIMEDOUT) {
                got = stalkd_mx_try(x);
                break;
            }
        }
        __atomic_sub_fetch(&x->waiters, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&x->m);
        Py_END_ALLOW_THREADS
        return got;
    }
    static inline void stalkd_mx_give(void *p) {
        stalkd_mx_t *x = (stalkd_mx_t *)p;
        __atomic_store_n(&x->locked, 0, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&x->waiters, __ATOMIC_SEQ_CST) != 0) {
            pthread_mutex_lock(&x->m);
            pthread_cond_signal(&x->c);
            pthread_mutex_unlock(&x->m);
        }
    }
    """
    void *_mx_new "stalkd_mx_new" ()
    void _mx_free "stalkd_mx_free" (void *lock)
    bint _mx_take "stalkd_mx_take" (void *lock, double timeout)
    void _mx_give "stalkd_mx_give" (void *lock)

@cython.final
cdef class Mutex:
    cdef void *_lock
    cdef bint _held

    cpdef bint acquire(self, bint blocking=*, double timeout=*) except -1
    cpdef release(self)
