"""JSON values -> instances of the annotated Python type (what `type=` and `@cn.function` return)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Literal, Optional, TypedDict, Union

import pydantic
import pytest

from constrain.jsonschema.values import value_from_json


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: float
    y: Annotated[int, "meta"]


@dataclasses.dataclass
class Shape:
    name: str
    corners: list[Point]
    color: Color
    tag: Optional[Literal["a", "b"]] = None  # noqa: UP045


class Movie(TypedDict):
    title: str
    year: int


class User(pydantic.BaseModel):
    name: str
    age: int


def test_nested_dataclasses_enums_and_numbers():
    data = {"name": "tri", "corners": [{"x": 1, "y": 2.0}], "color": "blue", "tag": None}
    shape = value_from_json(Shape, data)
    assert shape == Shape("tri", [Point(1.0, 2)], Color.BLUE, None)
    assert isinstance(shape.corners[0].x, float) and isinstance(shape.corners[0].y, int)


def test_containers_unions_typeddict_pydantic():
    assert value_from_json(tuple[int, str], [1, "a"]) == (1, "a")
    assert value_from_json(tuple[float, ...], [1, 2]) == (1.0, 2.0)
    assert value_from_json(set[int], [1, 2]) == {1, 2}
    assert value_from_json(dict[str, Point], {"p": {"x": 0, "y": 1}}) == {"p": Point(0.0, 1)}
    assert value_from_json(Union[int, list[int]], [3]) == [3]  # noqa: UP007
    assert value_from_json(Movie, {"title": "M", "year": 1999}) == {"title": "M", "year": 1999}
    assert value_from_json(User, {"name": "Ada", "age": 36}) == User(name="Ada", age=36)
    assert value_from_json(Literal[Color.RED, "x"], "red") is Color.RED


def test_misfits_are_errors():
    with pytest.raises(ValueError):
        value_from_json(Literal["a"], "b")
    with pytest.raises(ValueError):
        value_from_json(Union[int, str], [1])  # noqa: UP007
    with pytest.raises(TypeError):
        value_from_json(complex, 1)
