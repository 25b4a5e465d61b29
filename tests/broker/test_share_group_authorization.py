"""The share group membership APIs' ACL checks, in process through the table and the bindings of
``test_authorization_table`` (everything on group ``allowed-group`` and topic ``allowed``, nothing on the others):
ShareGroupHeartbeat needs GROUP READ, then TOPIC DESCRIBE on every subscribed topic (a refused one is named);
ShareGroupDescribe needs GROUP DESCRIBE, per group."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.broker.test_authorization_table import _serve


async def test_share_heartbeat_needs_group_read() -> None:
    response, handler = await _serve(76, 1, group_id="other-group", member_id="m", member_epoch=0,
                                     subscribed_topic_names=("allowed",))
    assert response.error_code == ErrorCode.group_authorization_failed
    assert handler.asked == []


async def test_share_heartbeat_needs_describe_on_every_subscribed_topic() -> None:
    response, handler = await _serve(76, 1, group_id="allowed-group", member_id="m", member_epoch=0,
                                     subscribed_topic_names=("allowed", "secret"))
    assert response.error_code == ErrorCode.topic_authorization_failed
    assert response.error_message == "The following topics are not authorized: secret"
    assert handler.asked == []
    _, allowed = await _serve(76, 1, group_id="allowed-group", member_id="m", member_epoch=0,
                              subscribed_topic_names=("allowed",))
    assert len(allowed.asked) == 1


async def test_share_describe_refuses_per_group() -> None:
    response, handler = await _serve(77, 1, group_ids=("allowed-group", "other-group"),
                                     include_authorized_operations=False)
    assert handler.asked[0].group_ids == ("allowed-group",)
    assert [(g.group_id, g.error_code) for g in response.groups] == [
        ("other-group", ErrorCode.group_authorization_failed)
    ]
