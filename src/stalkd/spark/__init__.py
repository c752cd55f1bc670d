"""stalkd.spark"""
