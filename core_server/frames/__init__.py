"""TODO frames"""
