"""The script that checks, inside an image, that a stage's command line parses: run as
`<python> -c SCRIPT -m <module> <args...>` (the operator's own interpreter name and args), it
runs the module as __main__ until its argument parser has parsed, then prints what it parsed
and exits 0, before the stage does any work. argparse's own error (exit 2) means the image's
program does not accept what the operator renders. torchrun's parse is followed by the parse of
the module it would launch."""

SCRIPT = r"""
import argparse, json, runpy, sys

class Parsed(BaseException):
    pass

state = {"depth": 0, "strict": False}
known = argparse.ArgumentParser.parse_known_args
strict = argparse.ArgumentParser.parse_args

def parse_known_args(self, args=None, namespace=None):
    state["depth"] += 1
    try:
        result = known(self, args, namespace)
    finally:
        state["depth"] -= 1
    if state["depth"] == 0:
        if state["strict"] and result[1]:
            self.error("unrecognized arguments: " + " ".join(result[1]))
        raise Parsed(self.prog, result[0])
    return result

def parse_args(self, args=None, namespace=None):
    state["strict"] = state["depth"] == 0
    return strict(self, args, namespace)

argparse.ArgumentParser.parse_known_args = parse_known_args
argparse.ArgumentParser.parse_args = parse_args

def parse(module, args):
    state.update(depth=0, strict=False)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except Parsed as parsed:
        return parsed.args
    sys.exit(f"{module}: ran to its end without parsing its arguments")

assert sys.argv[1] == "-m", sys.argv
module, args = sys.argv[2], sys.argv[3:]
programs = []
prog, namespace = parse(module, args)
programs.append({"module": module, "prog": prog, "args": {k: str(v) for k, v in vars(namespace).items()}})
if hasattr(namespace, "training_script"):  # torchrun: then the module it launches
    prog, inner = parse(namespace.training_script, list(namespace.training_script_args))
    programs.append({"module": namespace.training_script, "prog": prog, "args": {k: str(v) for k, v in vars(inner).items()}})
print(json.dumps(programs))
"""
