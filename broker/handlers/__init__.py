"""Request handlers, one module per API family. Modules register themselves with ``registry.handler``;
``registry.load_handlers`` imports every module here, so adding a handler needs no edit to a shared file."""
