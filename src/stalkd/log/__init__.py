"""stalkd.log"""
