"""The cluster and its tenancy: metadata, topics, their layout and generations, partitioning.

Also the ACL plan and its checks, principals and credentials.
"""
