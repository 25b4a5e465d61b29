"""Client quota enforcement (KIP-13 byte rates, KIP-124 request percentage, KIP-219 throttling), sans-I/O.

``wire.sampled_rate`` measures a rate over Kafka's sampled windows, ``resolution`` finds which quota entity
applies to a (principal, client id) with Kafka's precedence, ``manager`` records what each client used and answers
how long it must be throttled, and ``busy_time`` measures a request handler's own time on the event loop. The request
dispatcher (``broker.request_dispatcher``) is the thin shell that feeds them and mutes the connection.
"""
