# The C types of frames.py when Cython compiles it (stalkd.extensions): a standby checks every
# record its primary sends here, so decoding is a C call and a record's fields are read at fixed
# offsets. frames.py is the source; this declares types only.

from stalkd.engine.model cimport Record, decode
