"""What the Dagster UI shows of an asset: a Markdown summary first, charts, decoded examples,
then the tables and counts, and the results of its checks."""
