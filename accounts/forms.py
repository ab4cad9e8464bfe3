import unicodedata
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm, PasswordResetForm, SetPasswordForm
from django.template.loader import render_to_string
from oauth2_provider.forms import AllowForm

from accounts import services
from accounts.models import User
from leroy.schemas import visible_name


class AccountEmailField(forms.EmailField):
    """An account's address, in lower case, spelled one way only: no invisible (format) character, no full-width or
    other compatibility form, no quoted local part. Each of those reaches the same mailbox as its plain spelling
    (found from outside: full-width letters in the domain, and `"alice"@example.com`, became accounts beside
    alice@example.com)."""

    default_error_messages = {
        "spelling": "Type the address plainly: no invisible or full-width characters and no quotes.",
        "reserved": "Enter an address that can receive mail.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=254, **kwargs)

    def clean(self, value: Any) -> str:
        address = str(super().clean(value)).strip().lower()
        invisible = any(unicodedata.category(character) == "Cf" for character in address)
        if invisible or unicodedata.normalize("NFKC", address) != address or '"' in address:
            raise forms.ValidationError(self.error_messages["spelling"], code="spelling")
        if address.endswith(".invalid"):  # reserved: no mailbox; closed accounts' addresses live there
            raise forms.ValidationError(self.error_messages["reserved"], code="reserved")
        return address


class SignupForm(forms.Form):
    """Only the address: the password is chosen from the link e-mailed to it, so the answer never says
    whether an account exists."""

    email = AccountEmailField(widget=forms.EmailInput(attrs={"autocomplete": "email", "autofocus": True}))


class ActivationForm(SetPasswordForm):
    """The password chosen from the sign-up link; saving it proves the address and activates the account."""

    def save(self, commit: bool = True) -> User:
        user: User = super().save(commit=False)
        user.is_active = True
        if commit:
            user.save(update_fields=["password", "is_active"])
        return user


class CredentialsRevocation(forms.Form):
    """A new password's choice of whether the account's MCP credentials go with the old one."""

    revoke_credentials = forms.BooleanField(
        required=False,
        label="Also revoke every API key and disconnect every OAuth client",
        help_text="Choose this if someone else may have used your account: your agents stop working until you "
        "give them a new key or connect them again. Other signed-in browsers are signed out either way.",
    )


class OpenAccountPassword(SetPasswordForm):
    """A new password stored only while the account is active and open (accounts.services.password_store), never by
    saving the whole row the form read; raises AccountError("account_inactive") otherwise."""

    def set_password_and_save(
        self,
        user: User,
        password_field_name: str = "password1",  # noqa: S107  (Django's signature: a field's name, not a secret)
        commit: bool = True,
    ) -> User:
        user.set_password(self.cleaned_data[password_field_name])
        if commit:
            services.password_store(user=user)
        return user


class ResetPasswordForm(CredentialsRevocation, OpenAccountPassword):
    """The password chosen from a reset link."""


class ChangePasswordForm(CredentialsRevocation, OpenAccountPassword, PasswordChangeForm):
    """A signed-in account's new password, given its current one."""


class CurrentPasswordForm(forms.Form):
    """A signed-in account's form that its current password must accompany (the view counts a wrong one toward the
    sign-in lockout: `accounts.views.password_form_judged`)."""

    password = forms.CharField(
        label="Current password", strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "current-password"})
    )

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        self.user = user
        super().__init__(*args, **kwargs)

    def clean_password(self) -> str:
        password: str = self.cleaned_data["password"]
        if not self.user.check_password(password):
            raise forms.ValidationError("Your password was entered incorrectly. Please enter it again.")
        return password


class EmailChangeForm(CurrentPasswordForm):
    """A new address for the account; it changes once the link mailed to it is followed."""

    email = AccountEmailField(label="New e-mail address", widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    field_order = ["email", "password"]

    def clean_email(self) -> str:
        email: str = self.cleaned_data["email"]
        if email == self.user.email:
            raise forms.ValidationError("That is already this account's address.")
        return email


class AccountCloseForm(CurrentPasswordForm):
    """Closing cannot be undone: a typed confirmation as well as the password."""

    CONFIRMATION = "close my account"

    confirmation = forms.CharField(label=f"Type “{CONFIRMATION}” to confirm", max_length=100)

    def clean_confirmation(self) -> str:
        typed: str = self.cleaned_data["confirmation"]
        if typed.strip() != self.CONFIRMATION:
            raise forms.ValidationError(f"Type “{self.CONFIRMATION}” exactly; nothing was closed.")
        return typed


class EmailAuthenticationForm(AuthenticationForm):
    username = forms.EmailField(
        label="Email",
        max_length=254,
        widget=forms.EmailInput(attrs={"autocomplete": "username", "autofocus": True}),
    )
    error_messages = {
        **AuthenticationForm.error_messages,
        # Django's says both fields may be case-sensitive; the address is not (it is matched in lower case).
        "invalid_login": "Please enter a correct email and password. Note that the password is case-sensitive.",
    }

    def clean_username(self) -> str:
        # Addresses are stored in lower case (sign-up folds them): "Alice@example.com" is the same account.
        return str(self.cleaned_data["username"]).lower()


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    write = forms.BooleanField(
        required=False,
        label="Also allow mcp:write (create strategies, backtests, optimizations, alerts and journal notes; spend "
        "credits). Leave unticked for a read-only key.",
    )

    def clean_name(self) -> str:
        """The rule for every name shown in a list (leroy.schemas.Name): a name nobody reads as written is refused."""
        try:
            return visible_name(self.cleaned_data["name"])
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None


class ConsentForm(AllowForm):
    """DOT's consent form plus the user's choice to withhold mcp:write when a client asks for it."""

    grant_write = forms.BooleanField(required=False)


class AccountPasswordResetForm(PasswordResetForm):
    """Django's reset form, its mail handed to a worker (accounts.services.account_mail_send): Django sent it inside
    the request, for existing accounts only, so a slow mail server told who has an account."""

    def send_mail(
        self,
        subject_template_name: str,
        email_template_name: str,
        context: dict[str, Any],
        from_email: str | None,
        to_email: str,
        html_email_template_name: str | None = None,
    ) -> None:
        subject = "".join(render_to_string(subject_template_name, context).splitlines())
        services.account_mail_send(subject=subject, body=render_to_string(email_template_name, context), to=to_email)
