from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.password_validation import validate_password
from oauth2_provider.forms import AllowForm

from accounts.models import User


class SignupForm(forms.Form):
    email = forms.EmailField(max_length=254)
    password = forms.CharField(widget=forms.PasswordInput, strip=False)

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].lower()
        if User.objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("An account with this email already exists.")
        return email

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        password = cleaned.get("password")
        if password:
            validate_password(password, User(email=cleaned.get("email", "")))
        return cleaned


class EmailAuthenticationForm(AuthenticationForm):
    username = forms.EmailField(label="Email", max_length=254)


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    write = forms.BooleanField(
        required=False,
        label="Allow mcp:write (create strategies, backtests, optimizations, alerts and journal notes; spend credits)",
    )


class ConsentForm(AllowForm):
    """DOT's consent form plus the user's choice to withhold mcp:write when a client asks for it."""

    grant_write = forms.BooleanField(required=False)
