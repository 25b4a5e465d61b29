"""A broker's view of a controller quorum over the network, one idea per module:

- :mod:`controller.remote.channel`: finding the active controller among the voters and sending it requests, with
  bounded retries;
- :mod:`controller.remote.replica`: the broker's copy of the committed metadata (a Raft observer, or the combined
  node's own voter);
- :mod:`controller.remote.stream_metadata`: stream and object metadata served by the active controller;
- :mod:`controller.remote.client`: :class:`~controller.remote.client.RemoteControllerClient`, the broker's
  `ControllerClient` built from the three.

Import from the module that holds the idea; this package re-exports nothing.
"""
