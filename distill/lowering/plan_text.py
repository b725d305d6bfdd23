def plan_text(plan, module):
    return ""
