"""One SQL adapter for SQLite and PostgreSQL, with thin dialects.

What both databases mean the same way is written once here: the columns and
row mappers, guards and op-to-SQL (:mod:`.shared`), the data-access statements
(:mod:`.queries`), fair pools (:mod:`.pools`), prune batches (:mod:`.pruning`),
and how each database spells placeholders, tenant checks and codecs
(:mod:`.dialect`). :mod:`starflow.adapters.sqlite` and
:mod:`starflow.adapters.postgres` keep only their driver.
"""
