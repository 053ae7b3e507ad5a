# Typed view of the package for type checkers (the runtime is __init__.py:
# enums and helpers are loaded lazily there; the methods written in Python
# are declared in the spec, so their stubs are in _ibverbs.pyi).
from ._cmid import CMID as CMID  # first: the star import below keeps it (the C base's subclass)
from ._ibverbs import *  # type: ignore[assignment]  # noqa: F401,F403  (CMID: the subclass above)
from ._device import Device as Device, get_device_list as get_device_list
from ._gid import Gid as Gid
from ._generated.enums import *  # noqa: F401,F403  (what ibverbs.enums re-exports)
from .errors import CompletionError as CompletionError, VerbsError as VerbsError, WaitTimeoutError as WaitTimeoutError
from .flow import (FlowAttr as FlowAttr, FlowSpecEth as FlowSpecEth, FlowSpecIPv4 as FlowSpecIPv4,
                   FlowSpecTCPUDP as FlowSpecTCPUDP)
from .helpers import (QPInfo as QPInfo, RemoteBuffer as RemoteBuffer, connect_rc as connect_rc, local_qp_info as local_qp_info,
                      reg_tensor as reg_tensor, tensor_addr_len as tensor_addr_len)

__version__: str
