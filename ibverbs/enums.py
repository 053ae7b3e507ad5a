"""The rdma-core enums (IntEnum / IntFlag), generated from verbs.h.

Members are the C names without their prefix: IBV_ACCESS_LOCAL_WRITE is
AccessFlags.LOCAL_WRITE, IBV_MTU_1024 is MTU.MTU_1024.  The classes live in
the generated module ibverbs._generated.enums; spec/enums.yaml says which
C enums are exposed.
"""
from ._generated.enums import *  # noqa: F401,F403
from ._generated.enums import __all__  # noqa: F401
