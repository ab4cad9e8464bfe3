"""The console mailer prints e-mail as a person reads it, so a link copied from the console works."""

import io

from django.core.mail import EmailMessage

from leroy.mail import ReadableConsoleBackend

LINK = "http://127.0.0.1:8844/account/signup/confirm/Mg/dj78br-34dd6cf7073163cbbc9b33617f8dceba/"


def test_a_long_link_and_non_ascii_text_are_printed_whole():
    stream = io.StringIO()
    connection = ReadableConsoleBackend(stream=stream)
    body = f"Hello — choose your password here:\n\n{LINK}\n"

    message = EmailMessage("Your Leroy account", body, "no-reply@leroy.local", ["eve@example.com"])

    assert connection.send_messages([message]) == 1
    assert stream.getvalue() == (
        "From: no-reply@leroy.local\nTo: eve@example.com\nSubject: Your Leroy account\n\n"
        f"Hello — choose your password here:\n\n{LINK}\n\n" + "-" * 79 + "\n"
    )
