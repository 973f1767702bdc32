"""`imagebuild verify`: check a built image against the pins, arch profile and constraints it was built from."""

from imagebuild.verify.expectations import Expectations, build_expectations
from imagebuild.verify.result import CheckResult, VerifyResult
from imagebuild.verify.runner import VerifyOptions, prepare_verify, verify

__all__ = [
    "CheckResult",
    "Expectations",
    "VerifyOptions",
    "VerifyResult",
    "build_expectations",
    "prepare_verify",
    "verify",
]
