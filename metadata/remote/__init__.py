"""A broker's view of a controller quorum over the network, one idea per module:

- :mod:`metadata.remote.channel`: finding the active controller among the voters and sending it requests, with
  bounded retries;
- :mod:`metadata.remote.follower`: what the client needs of the broker's copy of the committed metadata (a Raft
  observer, or the combined node's own voter, both built by the controller role: ``controller.metadata_replica``);
- :mod:`metadata.remote.discovery`: where the controllers are, asked of the brokers;
- :mod:`metadata.remote.stream_metadata`: stream and object metadata served by the active controller;
- :mod:`metadata.remote.client`: :class:`~metadata.remote.client.RemoteControllerClient`, the broker's
  `ControllerClient` built from them.

Import from the module that holds the idea; this package re-exports nothing.
"""
