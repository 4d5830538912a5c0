//! A metric family with a label set fixed at construction (per peer id, per role, per request
//! class). Members are found by position (enums) or by a linear scan of label values (a few
//! peers): neither allocates, so updates stay allocation-free.

/// Metrics of one name that differ only in their label values.
#[derive(Debug)]
pub struct Family<M> {
    label_names: &'static [&'static str],
    members: Box<[(Box<[String]>, M)]>,
}

impl<M: Default> Family<M> {
    /// One member per entry of `value_sets`; each entry holds one value per label name.
    /// Entries whose length differs from `label_names` are padded or cut to fit, so the
    /// exposition stays well formed.
    pub fn new<I, V, S>(label_names: &'static [&'static str], value_sets: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let members = value_sets
            .into_iter()
            .map(|values| {
                let mut v: Vec<String> = values
                    .into_iter()
                    .map(Into::into)
                    .take(label_names.len())
                    .collect();
                v.resize(label_names.len(), String::new());
                (v.into_boxed_slice(), M::default())
            })
            .collect();
        Family {
            label_names,
            members,
        }
    }
}

impl<M> Family<M> {
    /// The member at `index` (the order of construction).
    #[inline]
    pub fn at(&self, index: usize) -> Option<&M> {
        self.members.get(index).map(|(_, m)| m)
    }

    /// The member whose label values equal `values`.
    pub fn find(&self, values: &[&str]) -> Option<&M> {
        self.members
            .iter()
            .find(|(v, _)| v.len() == values.len() && v.iter().zip(values).all(|(a, b)| a == b))
            .map(|(_, m)| m)
    }

    /// Label names, in order.
    pub fn label_names(&self) -> &'static [&'static str] {
        self.label_names
    }

    /// Every member with its label values.
    pub fn iter(&self) -> impl Iterator<Item = (&[String], &M)> {
        self.members.iter().map(|(v, m)| (&v[..], m))
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when the family has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::Counter;

    #[test]
    fn members_are_found_by_index_and_by_values() {
        let f: Family<Counter> = Family::new(&["peer", "zone"], [["n1", "a"], ["n2", "b"]]);
        f.at(1).unwrap().add(3);
        f.find(&["n1", "a"]).unwrap().inc();
        assert_eq!(f.find(&["n2", "b"]).unwrap().get(), 3);
        assert_eq!(f.at(0).unwrap().get(), 1);
        assert!(f.find(&["n3", "a"]).is_none());
        assert!(f.find(&["n1"]).is_none());
        assert!(f.at(2).is_none());
    }

    #[test]
    fn value_sets_are_fitted_to_the_label_names() {
        let f: Family<Counter> = Family::new(&["a", "b"], [vec!["1"], vec!["1", "2", "3"]]);
        let values: Vec<Vec<String>> = f.iter().map(|(v, _)| v.to_vec()).collect();
        assert_eq!(values, vec![vec!["1", ""], vec!["1", "2"]]);
    }
}
