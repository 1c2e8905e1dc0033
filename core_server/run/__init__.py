"""TODO run"""
