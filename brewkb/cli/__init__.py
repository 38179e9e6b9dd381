"""The command line: click commands that parse options, call one API
function, print its result and map errors to exit codes.

It may import the API and the output helpers; nothing below the API does the
work of a command here.
"""
