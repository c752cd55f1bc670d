# snapshot.py compiled by Cython (an augmenting .pxd: snapshot.py stays the one source): a
# snapshot's copy of the live jobs reads each job's fields at their offsets (objects.pxd), not
# through a Python attribute lookup per field per job.

cimport cython

from stalkd.engine.objects cimport Job, Tube, job_body


@cython.locals(j=Job, t=Tube, last_t=Tube, cur=list)
cpdef dict _group_jobs(list jobs)

@cython.locals(j=Job, i=Py_ssize_t, ids=list, pris=list, delays=list, ttrs=list, created=list, deadlines=list,
               bodies=list, counters=list)
cpdef tuple _job_columns(list jobs, bint ready)
