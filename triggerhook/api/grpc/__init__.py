"""The gRPC API (docs/api.md, "gRPC"): ``triggerhook.proto``, its generated
message module (``triggerhook_pb2``, made by the build: setup.py), the
outcomes' status codes (:mod:`.answers`), the messages as the HTTP API's
bodies (:mod:`.messages`) and the server (:mod:`.server`)."""
