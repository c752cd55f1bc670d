# The C types of snapjobs.py when Cython compiles it (stalkd.extensions): the columns are the
# tuples struct gives, read unchecked by index; each job is a C call to new_lazy_job.
# snapjobs.py is the source; this declares types only.

cimport cython

from stalkd.engine.heap cimport pack
from stalkd.engine.objects cimport Job, Tube, new_lazy_job

@cython.locals(out=list, n=Py_ssize_t, i=Py_ssize_t, a=Py_ssize_t, ln=Py_ssize_t, total=Py_ssize_t,
               urgent=Py_ssize_t)
cpdef list block_jobs(Tube tube, object state, tuple ids, tuple pris, tuple delays, tuple ttrs,
                      tuple lens, tuple created, bytes bodies, list keys)
