"""One module per artefact that crosses a stage boundary: its typed records, writer and reader.

rundir      run directory       (measure -> analyze, fit)
profile     profile JSON        (fit -> simulate, plan)
results     simulation results  (simulate -> plan, report)
"""
