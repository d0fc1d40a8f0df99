"""What every Apple-library judge script shares: the checks and their results."""

from appstoreserverlibrary.signed_data_verifier import VerificationException, VerificationStatus

APP_APPLE_ID = 1234567890  # what the simulator puts in Production notifications, as Apple puts the app's id
results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else f": {detail}"), flush=True)
    return ok


def attempt(name, body):
    """Runs body(); a raised exception is a failed check with its message."""
    try:
        return body()
    except Exception as error:  # noqa: BLE001 - every failure is reported as a check
        check(name, False, f"{type(error).__name__}: {error}")
        return None


def status_of(call):
    try:
        call()
        return VerificationStatus.OK
    except VerificationException as error:
        return error.status
