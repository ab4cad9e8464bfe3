"""The console mailer of an installation without SMTP (the demo prints e-mail on its console)."""

from typing import Any

from django.core.mail.backends import console


class ReadableConsoleBackend(console.EmailBackend):
    """Each e-mail as a person reads it: its addresses, subject and text, every link whole on its line. The stock
    console backend prints the wire form, whose quoted-printable soft breaks split a long link over two lines (an
    `=` at the end of the first), so a sign-up or reset link copied from the console did not work."""

    def write_message(self, message: Any) -> None:
        self.stream.write(
            f"From: {message.from_email}\nTo: {', '.join(message.to)}\nSubject: {message.subject}\n\n{message.body}\n"
        )
        self.stream.write("-" * 79 + "\n")
