"""Kafka's broker: request handlers, partitions on Fjord's streams, consumer groups.

``request_dispatcher`` hands each request frame to its handler (``handlers/table.py`` lists every API served);
handlers see the node through ``services.BrokerServices``; ``partition`` turns a Kafka partition into the log, time
and meta streams of DESIGN.md §4; ``groups`` is the group coordinator. The broker reaches the controller only
through ``metadata.controller_api.ControllerClient`` and storage only through streams.
"""
