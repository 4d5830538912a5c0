//! Name-server custom headers that the remoting crate does not declare (spec §11.6 admin
//! calls). Same conventions as `remoting::custom_headers`: every value is text in `extFields`.

use remoting::command::ExtFields;
use remoting::custom_headers::{read_optional, read_required, write_value, CommandHeader};
use remoting::error::HeaderError;

/// DELETE_TOPIC_IN_NAMESRV (216) request; `clusterName` (5.x) limits the deletion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteTopicInNamesrvRequestHeader {
    pub topic: String,
    pub cluster_name: Option<String>,
}

impl CommandHeader for DeleteTopicInNamesrvRequestHeader {
    fn write_to(&self, ext: &mut ExtFields) {
        write_value(ext, "topic", &self.topic);
        if let Some(c) = &self.cluster_name {
            write_value(ext, "clusterName", c);
        }
    }
    fn read_from(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(DeleteTopicInNamesrvRequestHeader {
            topic: read_required(ext, "topic")?,
            cluster_name: read_optional(ext, "clusterName")?,
        })
    }
}

/// GET_KVLIST_BY_NAMESPACE (219) request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GetKvListByNamespaceRequestHeader {
    pub namespace: String,
}

impl CommandHeader for GetKvListByNamespaceRequestHeader {
    fn write_to(&self, ext: &mut ExtFields) {
        write_value(ext, "namespace", &self.namespace);
    }
    fn read_from(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(GetKvListByNamespaceRequestHeader {
            namespace: read_required(ext, "namespace")?,
        })
    }
}

/// REGISTER_TOPIC_IN_NAMESRV (217) request (body: TopicRouteData with the queue data).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterTopicRequestHeader {
    pub topic: String,
}

impl CommandHeader for RegisterTopicRequestHeader {
    fn write_to(&self, ext: &mut ExtFields) {
        write_value(ext, "topic", &self.topic);
    }
    fn read_from(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(RegisterTopicRequestHeader {
            topic: read_required(ext, "topic")?,
        })
    }
}

/// WIPE_WRITE_PERM_OF_BROKER (205) response: how many topics lost the write bit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WipeWritePermResponseHeader {
    pub wipe_topic_count: i32,
}

impl CommandHeader for WipeWritePermResponseHeader {
    fn write_to(&self, ext: &mut ExtFields) {
        write_value(ext, "wipeTopicCount", &self.wipe_topic_count);
    }
    fn read_from(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(WipeWritePermResponseHeader {
            wipe_topic_count: read_required(ext, "wipeTopicCount")?,
        })
    }
}

/// ADD_WRITE_PERM_OF_BROKER (327) response: how many topics got read+write back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddWritePermResponseHeader {
    pub add_topic_count: i32,
}

impl CommandHeader for AddWritePermResponseHeader {
    fn write_to(&self, ext: &mut ExtFields) {
        write_value(ext, "addTopicCount", &self.add_topic_count);
    }
    fn read_from(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(AddWritePermResponseHeader {
            add_topic_count: read_required(ext, "addTopicCount")?,
        })
    }
}
