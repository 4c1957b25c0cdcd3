"""Text cells of the CSV files msroute writes, made safe to open in a spreadsheet.

A spreadsheet runs a cell that begins with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage
return before one) as a formula: a model named ``=HYPERLINK("http://...")`` in an outcome table
or an expert id ``-2+3`` would run in whoever opens the results. As OWASP recommends against
CSV injection, such a text cell is written with a leading apostrophe (``'=HYPERLINK(...)``),
which spreadsheets read as "this is text" and do not show; numbers are written as numbers.
The csv module quotes a cell holding a comma or a quote, so no cell can start in the middle of
another.
"""

from __future__ import annotations

__all__ = ["FORMULA_STARTS", "text_cell"]

#: The first characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def text_cell(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: prefixed with ``'`` when it begins
    like a formula, unchanged otherwise.

    Examples
    --------
    >>> text_cell('=HYPERLINK("http://x")'), text_cell("small"), text_cell("-1")
    ('\\'=HYPERLINK("http://x")', 'small', "'-1")
    """
    return "'" + text if text.startswith(FORMULA_STARTS) else text
