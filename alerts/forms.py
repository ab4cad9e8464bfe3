from django import forms

from alerts.models import HORIZONS, SIDES, TIERS
from evidence.memory.strategies import MAX_ACTIVE_SIGNALS
from leroy.schemas import visible_name


class AlertCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    symbols = forms.CharField(
        required=False, max_length=600, help_text="Comma-separated tickers; leave empty and tick the box for all."
    )
    universe = forms.BooleanField(required=False, label="Every symbol the frame feed follows")
    side = forms.ChoiceField(choices=[(s, s) for s in SIDES])
    horizon_minutes = forms.TypedChoiceField(choices=[(h, f"{h} min") for h in HORIZONS], coerce=int, initial=15)
    min_active_signals = forms.IntegerField(min_value=0, max_value=MAX_ACTIVE_SIGNALS, initial=1)
    min_match_tier = forms.TypedChoiceField(choices=[(t, f"{t}/5") for t in TIERS], coerce=int, initial=1)
    min_win_rate = forms.FloatField(required=False, min_value=0, max_value=1, help_text="0..1, optional")
    min_average_return_pct = forms.FloatField(required=False, min_value=-100, max_value=100, help_text="optional")
    endpoint_url = forms.CharField(max_length=2000, label="HTTPS endpoint")
    expires_at = forms.DateTimeField(required=False, help_text="UTC, optional (YYYY-MM-DD HH:MM)")

    def clean_name(self) -> str:
        """The tool's rule for a name (leroy.schemas.Name): a name nobody can see as written is refused here too."""
        try:
            return visible_name(self.cleaned_data["name"])
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_symbols(self) -> list[str]:
        return [s.strip().upper() for s in self.cleaned_data["symbols"].split(",") if s.strip()]
