"""The gRPC API (docs/api.md, "gRPC"): the outcomes' status codes
(:mod:`.answers`), the messages as the HTTP API's bodies (:mod:`.messages`)
and the server (:mod:`.server`). What both ends share is the client
distribution's (:mod:`triggerhook_client.grpc`): ``triggerhook.proto``, its
generated message module (``triggerhook_pb2``, made by client/setup.py), the
service name and the trailing metadata keys; and so is the Python caller,
``GrpcClient``."""
