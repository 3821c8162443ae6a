"""Endpoint selection: the builder's endpoint, else the emulator variable, else the service."""

from __future__ import annotations

from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint

VARIABLE = "PYFLINK_GCP_TEST_EMULATOR_HOST"


def test_the_builders_endpoint_wins_and_only_http_urls_are_plain_text(monkeypatch):
    monkeypatch.setenv(VARIABLE, "127.0.0.1:9")
    assert resolve_endpoint("eu-svc.googleapis.com:443", VARIABLE) == Endpoint(
        "eu-svc.googleapis.com:443", False
    )
    assert resolve_endpoint("http://127.0.0.1:8085/", VARIABLE) == Endpoint("127.0.0.1:8085", True)
    assert resolve_endpoint("https://svc.example.com", VARIABLE) == Endpoint(
        "svc.example.com", False
    )
    assert resolve_endpoint("10.0.0.1:1", VARIABLE, insecure=True).insecure


def test_the_emulator_variable_is_plain_text_and_without_it_the_service_is_used(monkeypatch):
    monkeypatch.setenv(VARIABLE, "http://127.0.0.1:8086")
    assert resolve_endpoint(None, VARIABLE) == Endpoint("127.0.0.1:8086", True)
    monkeypatch.delenv(VARIABLE)
    default = resolve_endpoint(None, VARIABLE)
    assert default.is_default and not default.insecure


def test_the_rest_url_of_an_endpoint_follows_its_security():
    assert Endpoint("127.0.0.1:9050", True).http_url == "http://127.0.0.1:9050"
    assert Endpoint("bigquery.googleapis.com", False).http_url == "https://bigquery.googleapis.com"
