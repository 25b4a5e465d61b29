"""The shared metadata layer under the broker and the controller roles (DESIGN §2, README's Layout).

What both roles (and Spark) need and neither owns: the cluster records and the image they replay into
(``cluster_records``, ``image``; the stream records and their codec are ``storage.metadata``'s), the format of a
partition's meta stream (``meta_stream_records``), the ``ControllerClient`` API a broker codes against
(``controller_api``) and the client of a remote quorum (``remote``), the CONTROLLER listener's messages (``rpc``), the
one exception-to-error-code mapping (``errors``), Kafka's topic-name rules (``topic_names``), ACL bindings and the
authorizer's decision (``acl``), and the one translation of the admin APIs between Kafka's wire and the
``ControllerClient`` (``admin``). Nothing here imports ``broker`` or ``controller``.
"""
