"""TODO session"""
