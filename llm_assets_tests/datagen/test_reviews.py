"""The review rows."""

from __future__ import annotations

from collections import Counter

from llm_assets.datagen.reviews import generate_reviews, sentiment_of


def test_reviews():
    reviews = list(generate_reviews(2000, seed=9))
    assert reviews == list(generate_reviews(2000, seed=9))
    assert list(reviews[0]) == ["review_id", "rating", "title", "text"]
    ratings = Counter(r["rating"] for r in reviews)
    assert set(ratings) == {1, 2, 3, 4, 5}
    assert ratings[5] == max(ratings.values())
    assert len({r["review_id"] for r in reviews}) == len(reviews)
    assert all(r["title"] and len(r["text"]) > 10 for r in reviews)
    assert [sentiment_of(n) for n in range(1, 6)] == ["negative"] * 2 + ["neutral"] + [
        "positive"
    ] * 2
