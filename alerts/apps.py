"""Evidence alerts: wake rules evaluated on new verified frames, delivered as signed webhooks.

An account's rules (`create_evidence_alert` and the other tools in `tools.py`, the Alerts account page) are
evaluated by the `alerts.frames_evaluate` beat task against every frame newer than the watermark, with evidence's
own uncharged evaluation (`alerts/evidence.py` is the one module that imports evidence). A match creates at most
one Delivery per rule and frame, sent by `alerts.delivery_send` through the SSRF guard in `webhooks.py`, signed as
`signing.py` says, retried with full-jitter backoff until the delivery window ends; every send is an Attempt row.
"""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
