"""modeld's session contract, its wire, and the report driven through it: contenox's own layering.

| contenox/runtime (7d0a257f) | here |
| --- | --- |
| ``runtime/transport/session.go`` (the contract: types, interfaces) | :mod:`.contract` |
| ``runtime/transport/session.go`` errors, ``transport/grpc/errors.go`` | :mod:`.errors` |
| ``runtime/contextasm/manifest.go`` (``ContextManifest``, ``Digest``, ``CompatibleRuntime``) | :mod:`.manifest` |
| ``modeld/capacity/capacity.go`` ``Policy`` | :mod:`.capacity` |
| ``runtime/transport/memory.go`` (the in-memory Service) | :mod:`.memory` |
| ``runtime/transport/grpc/`` (the wire: server and client) | :mod:`.wire` |
| ``modeld/internal/sessionkit`` + the backend adapters (``modeld/llama/llamasession``) | :mod:`.session` (shared); each engine's adapter in its wing, ``cells/<engine>/session.py`` |
| modeld's slot and daemon (``cmd/modeld``) | :mod:`.service`, :mod:`.daemon` (``workbench cell serve``) |
| ``runtime/benchreport`` (a report driven through the contract only) | :mod:`.benchreport` |
| Go's ``encoding/json`` (the codec's and the digest's bytes) | :mod:`.gojson` |

The word "contract" means modeld's session contract, this package, only; the engine mechanisms under it are the
engine layer (:mod:`workbench.engine`). Importing this package imports no engine and no gRPC library: the wire's
modules import grpcio/grpclib when a server or client is made.
"""
