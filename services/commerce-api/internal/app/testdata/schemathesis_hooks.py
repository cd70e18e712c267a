"""Schemathesis hooks for commerce-api's contract run (schemathesis_test.go).

Two of the API's rules join fields, which OpenAPI 3.0 can state only in the
operations' descriptions: a listing's page × size is at most 10,000
(GET /api/v1/products), and an order names each product on one line
(POST /api/v1/orders). schemathesis.toml lets a valid request of those two
operations be answered 400; cross_field_rules requires that such a 400 is
that rule's and no other's. The filters keep the fuzzing phase from spending
its examples on such requests (the coverage phase does not apply them).
"""

import json

import schemathesis

LIST_WINDOW = 10_000  # store.ListWindow
MAX_SIZE = 100  # a larger size is served as 100
DEFAULT_SIZE = 20
WINDOW_DETAIL = "page × size must be at most 10000; the listing stops there"
REPEAT_DETAIL = "repeats the product of"


def _int(value, default):
    """The integer a query value stands for (the coverage phase sends strings)."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return default


def beyond_window(query):
    """Whether a listing's page × size is past the window."""
    if not isinstance(query, dict):
        return False
    page = _int(query.get("page"), 0)
    size = min(_int(query.get("size"), DEFAULT_SIZE), MAX_SIZE)
    return page * size > LIST_WINDOW


def repeated_products(body):
    """The indexes of an order's lines that repeat an earlier line's product."""
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return []
    seen, repeats = set(), []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "productId" not in item:
            continue
        key = json.dumps(item["productId"])
        if key in seen:
            repeats.append(i)
        seen.add(key)
    return repeats


@schemathesis.hook("filter_query").apply_to(operation_id="listProducts")
def within_window(ctx, query):
    return not beyond_window(query)


@schemathesis.hook("filter_body").apply_to(operation_id="createOrder")
def one_line_per_product(ctx, body):
    return not repeated_products(body)


@schemathesis.check
def cross_field_rules(ctx, response, case):
    """A valid request's 400 breaks a cross-field rule, and names only it."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    op = case.operation.definition.raw.get("operationId")
    if op not in ("listProducts", "createOrder"):
        return None
    errors = [(e.get("pointer"), e.get("detail", "")) for e in response.json().get("errors", [])]
    if op == "listProducts":
        want = [("page", WINDOW_DETAIL)]
        assert beyond_window(case.query), f"a listing within the window refused: {errors}"
        assert errors == want, f"a listing past the window refused with {errors}, want {want}"
        return None
    repeats = repeated_products(case.body)
    assert repeats, f"an order naming each product once refused: {errors}"
    want = {f"/items/{i}/productId" for i in repeats}
    assert all(d.startswith(REPEAT_DETAIL) for _, d in errors) and {p for p, _ in errors} <= want, (
        f"an order repeating products at {sorted(want)} refused with {errors}"
    )
    return None
