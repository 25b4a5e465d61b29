"""The ``kafka.*`` options of a ``fjord`` read or write, as the Kafka client here (librdkafka) takes them.

Spark's Kafka connector hands ``kafka.*`` to the Java client, so jobs carry Java client settings. librdkafka knows
most of them under the same names, refuses the others, and would do so only when a client is made: at planning on
the driver (the source) or inside every task attempt on the executors (the sink), as a ``KafkaException``
traceback. :func:`kafka_client_params` is the one place both use instead, on the driver: it takes the ``kafka.*``
options out, refuses the ones the connector owns, translates the Java settings that have a clear librdkafka
equivalent, and makes (without any bootstrap server, so nothing connects) the client each task would make, turning
what librdkafka refuses into one :class:`OptionError` naming the ``kafka.`` option.

Translated: ``sasl.jaas.config`` with Kafka's ``PlainLoginModule`` or ``ScramLoginModule`` and its ``username`` and
``password`` (to ``sasl.username``/``sasl.password``), ``ssl.endpoint.identification.algorithm`` empty (Java's
"no host name check", librdkafka's ``none``), ``fetch.max.wait.ms`` (``fetch.wait.max.ms``) and
``max.request.size`` (``message.max.bytes``). A JAAS line with ``tokenauth=true`` (a delegation token's login) is
refused: librdkafka's SCRAM sends no such extension, and would fail the login without saying why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, Producer

from spark_connector.errors import OptionError

__all__ = ["kafka_client_params"]

ClientConfig = dict[str, str | int | float | bool]

# Java client settings librdkafka has under another name, with the same meaning and unit.
_RENAMED = {"fetch.max.wait.ms": "fetch.wait.max.ms", "max.request.size": "message.max.bytes"}

# Java client settings librdkafka does not know, and what to give it instead.
_JAVA_ONLY_HINTS = {
    "ssl.truststore.location": "librdkafka reads CA certificates as PEM: give 'kafka.ssl.ca.location'",
    "ssl.truststore.password": "librdkafka reads CA certificates as PEM: give 'kafka.ssl.ca.location'",
    "ssl.truststore.type": "librdkafka reads CA certificates as PEM: give 'kafka.ssl.ca.location'",
    "ssl.truststore.certificates": "give the CA certificates as PEM in 'kafka.ssl.ca.pem'",
    "ssl.keystore.type": "librdkafka reads a PKCS#12 'kafka.ssl.keystore.location', or PEM "
    "'kafka.ssl.certificate.location' and 'kafka.ssl.key.location'",
    "buffer.memory": "librdkafka bounds its producer queue with 'kafka.queue.buffering.max.kbytes'",
    "default.api.timeout.ms": "the source's lookups have their own timeout, and 'kafkaConsumer.pollTimeoutMs' bounds "
    "a task's reads",
}

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)(?P<options>.*?);?\s*$",
                   re.DOTALL)
_JAAS_OPTION = re.compile(r'(?P<key>[\w.]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))')
_TRANSLATED_LOGIN_MODULES = ("PlainLoginModule", "ScramLoginModule")
_CREATE_FAILED = re.compile(r"^Failed to create \w+: ")
# librdkafka's settings that name a file it reads when a client is made.
_FILE_SETTINGS = frozenset({
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location", "ssl.crl.location",
    "ssl.engine.location", "sasl.kerberos.keytab",
})
_NAMED_PROPERTY = re.compile(r'configuration property:? "(?P<name>[^"]+)"')


def kafka_client_params(opts: Mapping[str, str], *, consumer: bool, owned: Mapping[str, str],
                        enforced: ClientConfig) -> dict[str, str]:
    """The ``kafka.*`` options of ``opts`` (lower-cased names) without the prefix and without
    ``bootstrap.servers``, Java settings translated. ``owned`` are settings the connector sets itself (name -> why
    not), ``enforced`` what it adds on top; the result with ``enforced`` must make a consumer (``consumer``) or a
    producer librdkafka accepts, else :class:`OptionError`."""
    params = {key[len("kafka."):]: value for key, value in opts.items()
              if key.startswith("kafka.") and key != "kafka.bootstrap.servers"}
    for name, why in owned.items():
        if name in params:
            raise OptionError(f"option 'kafka.{name}' is not supported: {why}")
    params = _translated(params)
    _check(params, enforced, consumer=consumer)
    return params


def _translated(params: Mapping[str, str]) -> dict[str, str]:
    result = dict(params)
    for java, native in _RENAMED.items():
        if java in result:
            if native in result:
                raise OptionError(f"options 'kafka.{java}' and 'kafka.{native}' are the same setting here "
                                  f"(librdkafka's {native}): give one")
            result[native] = result.pop(java)
    if result.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        result["ssl.endpoint.identification.algorithm"] = "none"
    if "sasl.jaas.config" in result:
        result.update(_jaas_credentials(result.pop("sasl.jaas.config"), result))
    return result


def _jaas_credentials(text: str, params: Mapping[str, str]) -> dict[str, str]:
    """``sasl.username``/``sasl.password`` from a Plain or SCRAM login module's JAAS line (as a Databricks-shaded
    ``kafkashaded.org.apache...`` class name too); other login modules have no librdkafka equivalent here."""
    match = _JAAS.match(text)
    module = match.group("module") if match else ""
    if not module.endswith(_TRANSLATED_LOGIN_MODULES):
        raise OptionError(
            f"option 'kafka.sasl.jaas.config': only Kafka's PlainLoginModule and ScramLoginModule (username and "
            f"password) are translated for librdkafka, got {module or text[:60]!r}; give librdkafka's own settings "
            "instead (e.g. 'kafka.sasl.oauthbearer.*', 'kafka.sasl.kerberos.*')")
    assert match is not None
    found = {m.group("key"): (m.group("quoted") if m.group("quoted") is not None else m.group("bare"))
             for m in _JAAS_OPTION.finditer(match.group("options"))}
    missing = [key for key in ("username", "password") if key not in found]
    if missing:
        raise OptionError(f"option 'kafka.sasl.jaas.config': the {module.rsplit('.', 1)[-1]} line has no "
                          f"{' and no '.join(missing)}")
    if re.sub(r"\\(.)", r"\1", found.get("tokenauth", "")).lower() == "true":
        raise OptionError("option 'kafka.sasl.jaas.config': tokenauth=true logs in with a delegation token, which "
                          "librdkafka (the Kafka client here) cannot do (its SCRAM sends no tokenauth extension); "
                          "give the user's own username and password")
    credentials: dict[str, str] = {}
    for key in ("username", "password"):
        if f"sasl.{key}" in params:
            raise OptionError(f"options 'kafka.sasl.jaas.config' and 'kafka.sasl.{key}' both give the SASL {key}: "
                              "give one")
        credentials[f"sasl.{key}"] = re.sub(r"\\(.)", r"\1", found[key])
    return credentials


def _check(params: Mapping[str, str], enforced: ClientConfig, *, consumer: bool) -> None:
    """Makes the client a task would make, without bootstrap servers (nothing connects, nothing is logged). The
    source makes its clients on the driver too, so what fails there fails the read; the sink's are the executors'."""
    if not consumer:
        # The sink's clients are made on the executors alone, as Spark's Kafka sink's are: the files they read (a
        # certificate, a key, a keytab) may be there and not on the driver, so the driver's check does without.
        params = {key: value for key, value in params.items() if key not in _FILE_SETTINGS}
    error = _refusal({**params, **enforced}, consumer=consumer)
    if error is None:
        return
    if _CREATE_FAILED.match(error) is None:
        # A setting refused on its own (unknown name, bad value): find which, as the message may name an alias.
        for key in sorted(params):
            alone = _refusal({key: params[key]}, consumer=consumer)
            if alone is not None and _CREATE_FAILED.match(alone) is None:
                raise OptionError(_message(key, alone))
    named = [key for key in sorted(params) if key in error]
    where = f"option 'kafka.{named[0]}' is" if len(named) == 1 else "the 'kafka.*' options are"
    raise OptionError(f"{where} refused by the Kafka client (librdkafka): {_CREATE_FAILED.sub('', error)}")


def _message(key: str, error: str) -> str:
    """The Java-only settings say what to give librdkafka instead; an unknown name says it is not librdkafka's."""
    hint = _JAVA_ONLY_HINTS.get(key)
    named = _NAMED_PROPERTY.search(error)
    if hint is not None or (error.startswith("No such configuration property") and named is not None
                            and named.group("name") == key):
        return (f"option 'kafka.{key}' is not a setting of the Kafka client here (librdkafka, not Java's)"
                + (f": {hint}" if hint else ""))
    return f"option 'kafka.{key}' is refused by the Kafka client (librdkafka): {error}"


def _refusal(config: Mapping[str, str | int | float | bool], *, consumer: bool) -> str | None:
    """librdkafka's refusal of ``config``, or None once a client is made with it (and closed again)."""
    quiet: ClientConfig = {"log_level": 0, **config}
    quiet.pop("bootstrap.servers", None)
    try:
        if consumer:
            quiet.setdefault("group.id", "fjord-spark-settings-check")
            Consumer(quiet).close()
        else:
            Producer(quiet).flush(0)
    except KafkaException as exc:
        return str(exc.args[0].str())
    return None
