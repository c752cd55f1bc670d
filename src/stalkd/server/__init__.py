"""stalkd.server"""
